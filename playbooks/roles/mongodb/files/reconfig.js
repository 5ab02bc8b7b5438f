// Applies one membership change the plan decided: replSetReconfig with the new configuration (relaxed Extended
// JSON, as replica_set_state.js printed it, with one member added, removed or changed and version + 1). Runs over a
// connection to the set, so the primary receives it. Reads {user, password, config} from stdin; prints
// "reconfigured" and the new version.
const { user, password, config } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
db.getSiblingDB('admin').auth(user, password);
const wanted = EJSON.deserialize(config, { relaxed: true });
db.adminCommand({ replSetReconfig: wanted, maxTimeMS: 60000 });
print(`reconfigured ${wanted.version}`);
