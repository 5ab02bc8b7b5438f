// Initiates the replica set (only if it has never been initiated) and creates or updates the
// application user. Idempotent: every run, the first or the hundredth, ends in the same state, so it
// runs after every install and upgrade, and a retried Job is harmless.
//
// Order of the steps:
//   1. replSetGetStatus on member 0 (as root; the root user was created by bootstrap-root.sh).
//      ok                  -> the set exists: nothing to initiate.
//      NotYetInitialized   -> initiate with every member's stable DNS name, unless another member
//                             already carries a replica-set config (member 0 lost its volume and
//                             rejoins by heartbeat: initiating would start a second set).
//      any other error     -> fail; the Job retries.
//   2. Wait until a primary is elected.
//   3. Cluster-wide default write concern: majority (a set with an arbiter otherwise defaults to w:1).
//   4. The application user: readWrite on the application database, nothing else.
//
// Runs as `mongosh --nodb <this file>`; settings come from init-config.json next to it, passwords from
// the environment (never from the command line, where they would show in the process list).

const fs = require('fs');

const NOT_YET_INITIALIZED = 94;
const ALREADY_INITIALIZED = 23;
const RETRY_PAUSE_MS = 3000;

const config = JSON.parse(fs.readFileSync('/var/run/harel/scripts/init-config.json', 'utf8'));
const rootPassword = process.env.HAREL_MONGO_ROOT_PASSWORD;
const appPassword = process.env.HAREL_MONGO_APP_PASSWORD;
if (!rootPassword || !appPassword) {
  throw new Error('HAREL_MONGO_ROOT_PASSWORD and HAREL_MONGO_APP_PASSWORD must be set');
}
const deadline = Date.now() + config.deadlineSeconds * 1000;

function log(message) {
  print(`init-replica-set: ${message}`);
}

function url(hosts, options, withRoot) {
  const credentials = withRoot
    ? `${encodeURIComponent(config.rootUsername)}:${encodeURIComponent(rootPassword)}@`
    : '';
  let query = `${options}&serverSelectionTimeoutMS=5000&connectTimeoutMS=5000`;
  if (withRoot) {
    query += '&authSource=admin';
  }
  if (config.tlsCAFile) {
    query += `&tls=true&tlsCAFile=${encodeURIComponent(config.tlsCAFile)}`;
  }
  return `mongodb://${credentials}${hosts.join(',')}/?${query}`;
}

// Retries `attempt` until it returns, or fails with the last error once the deadline has passed.
function retry(what, attempt) {
  for (;;) {
    try {
      return attempt();
    } catch (error) {
      if (Date.now() > deadline) {
        throw new Error(`gave up after ${config.deadlineSeconds}s waiting for ${what}: ${error.message}`);
      }
      log(`waiting for ${what}: ${error.message}`);
      sleep(RETRY_PAUSE_MS);
    }
  }
}

// A server's refusal as a result document (mongosh throws it), so callers can branch on its code.
// Errors without a server code (network, authentication) still throw.
function command(connection, body) {
  try {
    return connection.getDB('admin').runCommand(body);
  } catch (error) {
    if (typeof error.code !== 'number') {
      throw error;
    }
    return { ok: 0, code: error.code, codeName: error.codeName, errmsg: error.message };
  }
}

function directConnection(host, withRoot) {
  return new Mongo(url([host], 'directConnection=true', withRoot));
}

function replicaSetStatusOfMemberZero() {
  return retry(`member 0 (${config.dataMembers[0]}) to accept the root user`, () => {
    const connection = directConnection(config.dataMembers[0], true);
    const status = command(connection, { replSetGetStatus: 1 });
    connection.close();
    if (status.ok !== 1 && status.code !== NOT_YET_INITIALIZED) {
      throw new Error(`replSetGetStatus failed: ${status.codeName}: ${status.errmsg}`);
    }
    return status;
  });
}

// The set name any other member already reports, or null when none has a config.
function setNameOnAnotherMember() {
  const others = config.dataMembers.slice(1).concat(config.arbiter ? [config.arbiter] : []);
  for (const host of others) {
    const hello = retry(`member ${host} to answer hello`, () => {
      const connection = directConnection(host, false);
      const answer = command(connection, { hello: 1 });
      connection.close();
      return answer;
    });
    if (hello.setName) {
      return `${hello.setName} (reported by ${host})`;
    }
  }
  return null;
}

function initiate() {
  const members = config.dataMembers.map((host, index) => ({ _id: index, host: host }));
  if (config.arbiter) {
    members.push({ _id: members.length, host: config.arbiter, arbiterOnly: true });
  }
  const body = { replSetInitiate: { _id: config.replicaSetName, members: members } };
  const result = retry('member 0 to accept rs.initiate', () => {
    const connection = directConnection(config.dataMembers[0], true);
    const answer = command(connection, body);
    connection.close();
    if (answer.ok !== 1 && answer.code !== ALREADY_INITIALIZED) {
      throw new Error(`rs.initiate failed: ${answer.codeName}: ${answer.errmsg}`);
    }
    return answer;
  });
  log(result.ok === 1 ? `initiated ${config.replicaSetName}` : 'initiated concurrently by an earlier run');
}

function connectToPrimary() {
  return retry('a primary', () => {
    const connection = new Mongo(url(config.dataMembers, `replicaSet=${config.replicaSetName}`, true));
    const hello = command(connection, { hello: 1 });
    if (!hello.isWritablePrimary) {
      connection.close();
      throw new Error('no primary elected yet');
    }
    return connection;
  });
}

function must(connection, body, what) {
  const result = command(connection, body);
  if (result.ok !== 1) {
    throw new Error(`${what} failed: ${result.codeName}: ${result.errmsg}`);
  }
  return result;
}

function ensureAppUser(primary) {
  const majority = { w: 'majority' };
  const roles = [{ role: 'readWrite', db: config.database }];
  const found = must(primary, { usersInfo: { user: config.appUsername, db: 'admin' } }, 'usersInfo');
  const user = { pwd: appPassword, roles: roles, mechanisms: ['SCRAM-SHA-256'], writeConcern: majority };
  if (found.users.length === 0) {
    must(primary, Object.assign({ createUser: config.appUsername }, user), 'createUser');
    log(`created user ${config.appUsername} with readWrite on ${config.database}`);
  } else {
    must(primary, Object.assign({ updateUser: config.appUsername }, user), 'updateUser');
    log(`updated user ${config.appUsername}: readWrite on ${config.database} only`);
  }
}

const status = replicaSetStatusOfMemberZero();
if (status.ok === 1) {
  log(`replica set ${status.set} already initiated: nothing to initiate`);
} else {
  const existingSet = setNameOnAnotherMember();
  if (existingSet) {
    log(`member 0 has no config but the set ${existingSet} exists: waiting for member 0 to rejoin it`);
  } else {
    initiate();
  }
}

const primary = connectToPrimary();
must(
  primary,
  { setDefaultRWConcern: 1, defaultWriteConcern: { w: 'majority' }, writeConcern: { w: 'majority' } },
  'setDefaultRWConcern',
);
log('default write concern: majority');
ensureAppUser(primary);
primary.close();
log('done');
