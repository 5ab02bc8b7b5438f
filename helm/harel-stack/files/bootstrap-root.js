// Runs inside bootstrap-root.sh, against member 0's temporary standalone instance (127.0.0.1, no
// auth). Creates the root user, or resets its password if an earlier attempt stopped half-way.
// A data directory that already belongs to a replica set is left alone: its users come from the set.
// The password comes from a file (a mounted Secret), never from the environment or the command line.

const fs = require('fs');

const username = process.env.HAREL_MONGO_ROOT_USERNAME;
const passwordFile = process.env.HAREL_MONGO_ROOT_PASSWORD_FILE;
if (!username || !passwordFile) {
  throw new Error('HAREL_MONGO_ROOT_USERNAME and HAREL_MONGO_ROOT_PASSWORD_FILE must be set');
}
const password = fs.readFileSync(passwordFile, 'utf8').replace(/\n$/, '');
if (!password) {
  throw new Error(`${passwordFile} is empty`);
}

// mongosh throws on a refused command; the ok check also covers a result returned instead.
function must(database, body) {
  const result = database.runCommand(body);
  if (result.ok !== 1) {
    throw new Error(`${Object.keys(body)[0]} failed: ${result.errmsg}`);
  }
  return result;
}

const replicaSetConfigs = db.getSiblingDB('local').getCollection('system.replset').countDocuments({});
if (replicaSetConfigs > 0) {
  print('bootstrap-root: this member already belongs to a replica set; its users come from the set');
} else {
  const admin = db.getSiblingDB('admin');
  const roles = [{ role: 'root', db: 'admin' }];
  const found = must(admin, { usersInfo: { user: username, db: 'admin' } });
  if (found.users.length === 0) {
    must(admin, { createUser: username, pwd: password, roles: roles });
    print(`bootstrap-root: created user ${username}`);
  } else {
    must(admin, { updateUser: username, pwd: password, roles: roles });
    print(`bootstrap-root: reset user ${username}`);
  }
}
