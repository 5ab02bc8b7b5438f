// Whether every member is PRIMARY or SECONDARY and reachable, as one JSON line. replSetGetStatus needs
// authentication: reads {user, password} of the user administrator from stdin.
const { user, password } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
db.getSiblingDB('admin').auth(user, password);
const status = db.adminCommand({ replSetGetStatus: 1 });
const members = status.members.map((m) => ({ name: m.name, state: m.stateStr, health: m.health }));
const healthy = members.every((m) => m.health === 1 && (m.state === 'PRIMARY' || m.state === 'SECONDARY'));
print(JSON.stringify({ healthy, members }));
