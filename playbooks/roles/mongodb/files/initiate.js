// Initiates the replica set read from stdin ({name, hosts: ["host:port", ...]}), members in that order. It
// runs without credentials: mongod already has keyFile and authorization on, and while no user exists the
// localhost exception admits this connection. Prints "initiated", or "already initiated" when the set was initiated meanwhile.
const { name, hosts } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const config = { _id: name, members: hosts.map((host, index) => ({ _id: index, host })) };
let reply;
try {
  reply = db.adminCommand({ replSetInitiate: config });
} catch (error) {
  reply = { ok: 0, codeName: error.codeName, errmsg: error.message };
}
if (reply.ok === 1) {
  print('initiated');
} else if (reply.codeName === 'AlreadyInitialized') {
  print('already initiated');
} else {
  throw new Error(`replSetInitiate failed: ${reply.codeName}: ${reply.errmsg}`);
}
