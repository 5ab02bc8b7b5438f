// Waits up to waitSeconds for every member to be reachable and PRIMARY or SECONDARY, then prints the last
// view as one JSON line: {"healthy": bool, "members": [{name, state, health}]}. replSetGetStatus needs
// authentication: reads {user, password, waitSeconds} from stdin, the password of the user administrator.
const { user, password, waitSeconds } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const POLL_MILLISECONDS = 2000;
db.getSiblingDB('admin').auth(user, password);
const deadline = Date.now() + waitSeconds * 1000;
let report;
for (;;) {
  const status = db.adminCommand({ replSetGetStatus: 1 });
  const members = status.members.map((m) => ({ name: m.name, state: m.stateStr, health: m.health }));
  const healthy = members.every((m) => m.health === 1 && (m.state === 'PRIMARY' || m.state === 'SECONDARY'));
  report = { healthy, members };
  if (healthy || Date.now() >= deadline) break;
  sleep(POLL_MILLISECONDS);
}
print(JSON.stringify(report));
