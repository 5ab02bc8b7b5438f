// Runs inside bootstrap-root.sh, against member 0's temporary standalone instance (127.0.0.1, no
// auth). Creates the root user, or resets its password if an earlier attempt stopped half-way.
// A data directory that already belongs to a replica set is left alone: its users come from the set.

const username = process.env.HAREL_MONGO_ROOT_USERNAME;
const password = process.env.HAREL_MONGO_ROOT_PASSWORD;
if (!username || !password) {
  throw new Error('HAREL_MONGO_ROOT_USERNAME and HAREL_MONGO_ROOT_PASSWORD must be set');
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
