// Creates or updates the two operator users, each with the least privilege its job needs:
//   monitor  clusterMonitor on admin + read on local: what the Percona mongodb_exporter reads
//            (serverStatus, replSetGetStatus, getDiagnosticData, the oplog's first and last entry)
//   backup   backup on admin (mongodump, the oplog included) + harelBackupStatus: insert, update and
//            find on <database>.backups only, where each backup run records its outcome; on a sharded cluster
//            also harelBackupPause (find, insert, update, remove on <database>.harel_meta, find and update on
//            <database>.workers: the workers' pause) and clusterManager (the balancer stopped and started),
//            what the quiesce of its dump needs (pause-workers.js)
// Idempotent: every run ends with exactly these roles and the given passwords, so it runs after every
// install and upgrade (and after a restore, which brings back the users of the backup's time).
//
// Runs as `mongosh --nodb --quiet --norc ops-users.js` in every deployment mode. Settings come as JSON in the
// environment variable HAREL_OPS_USERS:
//   {hosts: ["host:port", ...], replicaSetName, rootUsername, database, tlsCAFile: path (TLS with that CA) or null
//    or "" (no TLS), deadlineSeconds, monitor: {username}|null, backup: {username}|null}
// replicaSetName null: `hosts` are a sharded cluster's routers (the chart's mongos Service), reached without a
// replicaSet option; a router takes the users for the whole cluster (it keeps them on the config servers).
// and passwords from files named by HAREL_MONGO_ROOT_PASSWORD_FILE, HAREL_MONITOR_PASSWORD_FILE and
// HAREL_BACKUP_PASSWORD_FILE (mounted secrets), or else from the variables without _FILE; never from the
// command line.

const fs = require('fs');

const RETRY_PAUSE_MS = 3000;
const STATUS_ROLE = 'harelBackupStatus';
const PAUSE_ROLE = 'harelBackupPause';

function requiredEnv(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} must be set`);
  }
  return value;
}

// A secret from the file <name>_FILE names, else from <name> itself.
function secret(name) {
  const file = process.env[`${name}_FILE`];
  return file ? fs.readFileSync(file, 'utf8').trim() : requiredEnv(name);
}

const config = JSON.parse(requiredEnv('HAREL_OPS_USERS'));
const rootPassword = secret('HAREL_MONGO_ROOT_PASSWORD');
const deadline = Date.now() + config.deadlineSeconds * 1000;

function log(message) {
  print(`ops-users: ${message}`);
}

function primaryUrl() {
  let query = 'authSource=admin&serverSelectionTimeoutMS=5000&connectTimeoutMS=5000';
  if (config.replicaSetName) {
    query = `replicaSet=${config.replicaSetName}&${query}`;
  }
  if (config.tlsCAFile) {
    query += `&tls=true&tlsCAFile=${encodeURIComponent(config.tlsCAFile)}`;
  }
  const credentials = `${encodeURIComponent(config.rootUsername)}:${encodeURIComponent(rootPassword)}`;
  return `mongodb://${credentials}@${config.hosts.join(',')}/?${query}`;
}

// The primary (or a router), as soon as one is elected and reachable (the init step may still be running).
function connectToPrimary() {
  for (;;) {
    try {
      const connection = new Mongo(primaryUrl());
      const hello = connection.getDB('admin').runCommand({ hello: 1 });
      // A router answers isWritablePrimary true too (with msg "isdbgrid").
      if (hello.isWritablePrimary) {
        return connection;
      }
      connection.close();
      throw new Error('no writable primary yet');
    } catch (error) {
      if (Date.now() > deadline) {
        throw new Error(`gave up after ${config.deadlineSeconds}s waiting for a primary: ${error.message}`);
      }
      log(`waiting for a primary: ${error.message}`);
      sleep(RETRY_PAUSE_MS);
    }
  }
}

// mongosh throws a server's refusal; say which command it refused.
function run(admin, body) {
  try {
    return admin.runCommand(body);
  } catch (error) {
    throw new Error(`${Object.keys(body)[0]} failed: ${error.codeName || 'error'}: ${error.message}`);
  }
}

const majority = { w: 'majority' };

function ensureStatusRole(admin) {
  const privileges = [
    { resource: { db: config.database, collection: 'backups' }, actions: ['find', 'insert', 'update'] },
  ];
  const found = run(admin, { rolesInfo: { role: STATUS_ROLE, db: 'admin' } });
  const verb = found.roles.length === 0 ? 'createRole' : 'updateRole';
  run(admin, { [verb]: STATUS_ROLE, privileges: privileges, roles: [], writeConcern: majority });
  log(`${verb === 'createRole' ? 'created' : 'updated'} role ${STATUS_ROLE}: find, insert, update on ${config.database}.backups`);
}

function ensurePauseRole(admin) {
  const privileges = [
    { resource: { db: config.database, collection: 'harel_meta' }, actions: ['find', 'insert', 'update', 'remove'] },
    { resource: { db: config.database, collection: 'workers' }, actions: ['find', 'update'] },
  ];
  const found = run(admin, { rolesInfo: { role: PAUSE_ROLE, db: 'admin' } });
  const verb = found.roles.length === 0 ? 'createRole' : 'updateRole';
  run(admin, { [verb]: PAUSE_ROLE, privileges: privileges, roles: [], writeConcern: majority });
  log(`${verb === 'createRole' ? 'created' : 'updated'} role ${PAUSE_ROLE}: the workers' pause in ${config.database}`);
}

function ensureUser(admin, username, password, roles) {
  const found = run(admin, { usersInfo: { user: username, db: 'admin' } });
  const verb = found.users.length === 0 ? 'createUser' : 'updateUser';
  const body = { [verb]: username, pwd: password, roles: roles, mechanisms: ['SCRAM-SHA-256'], writeConcern: majority };
  run(admin, body);
  const granted = roles.map((r) => `${r.role}@${r.db}`).join(', ');
  log(`${verb === 'createUser' ? 'created' : 'updated'} user ${username}: ${granted}`);
}

const primary = connectToPrimary();
const admin = primary.getDB('admin');
if (config.monitor) {
  ensureUser(admin, config.monitor.username, secret('HAREL_MONITOR_PASSWORD'), [
    { role: 'clusterMonitor', db: 'admin' },
    { role: 'read', db: 'local' },
  ]);
}
if (config.backup) {
  ensureStatusRole(admin);
  const roles = [
    { role: 'backup', db: 'admin' },
    { role: STATUS_ROLE, db: 'admin' },
  ];
  if (!config.replicaSetName) {
    // a sharded cluster's dump is quiesced: the workers paused, the balancer stopped (pause-workers.js)
    ensurePauseRole(admin);
    roles.push({ role: PAUSE_ROLE, db: 'admin' }, { role: 'clusterManager', db: 'admin' });
  }
  ensureUser(admin, config.backup.username, secret('HAREL_BACKUP_PASSWORD'), roles);
}
primary.close();
log('done');
