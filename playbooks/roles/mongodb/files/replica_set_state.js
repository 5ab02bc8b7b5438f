// The replica set's configuration and each member's state, as the membership plan reads them (the role's
// harel_replica_set_step filter): one line of relaxed Extended JSON, {"config": ..., "status": {"members": [...]}}.
// Extended JSON keeps the config's ObjectId (settings.replicaSetId) intact for the replSetReconfig that follows.
// Runs over a connection to the set (the primary answers); authenticates as the user administrator, whose
// {user, password} it reads from stdin.
const { user, password } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
db.getSiblingDB('admin').auth(user, password);
const { config } = db.adminCommand({ replSetGetConfig: 1 });
const status = db.adminCommand({ replSetGetStatus: 1 });
const members = status.members.map((m) => ({ name: m.name, state: m.state, stateStr: m.stateStr, health: m.health }));
print(EJSON.stringify({ config, status: { members } }, { relaxed: true }));
