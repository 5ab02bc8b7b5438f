// Sets the replica set's featureCompatibilityVersion, the last step of a minor upgrade, once every member runs the
// new binary. Reads {user, password, version} from stdin. Prints {"changed": bool, "from": ..., "to": ...};
// setting the version it already has is not a change. `confirm: true` is MongoDB's acknowledgement that a
// downgrade afterwards needs its own procedure.
const { user, password, version } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const admin = db.getSiblingDB('admin');
admin.auth(user, password);
const current = admin.runCommand({ getParameter: 1, featureCompatibilityVersion: 1 }).featureCompatibilityVersion.version;
if (current !== version) {
  admin.runCommand({ setFeatureCompatibilityVersion: version, confirm: true, writeConcern: { w: 'majority' } });
}
print(JSON.stringify({ changed: current !== version, from: current, to: version }));
