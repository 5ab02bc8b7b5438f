// A stand-in for mongosh, to run the chart's MongoDB scripts under Node.js in tests: it offers the
// mongosh globals those scripts use (Mongo, db, print, sleep, require('fs'), process.env) over a
// simulated replica set held in memory. It is a test double: it answers the commands the scripts
// send the way a MongoDB 8.0 member does (mongosh throws a server refusal as an error carrying
// `code` and `codeName`), and records every command.
//
//   node fake_mongosh.js <script.js> <scenario.json>
//
// scenario.json: {"files": {path: text}, "env": {...}, "cluster": {...}} (see `cluster` below).
// Prints one JSON document: {"ok", "error", "printed", "calls", "connections", "cluster"}; exits 1 when the
// script threw. `connections`: the hosts and URL options of every `new Mongo(url)`, credentials left out.
'use strict';

const fs = require('fs');
const vm = require('vm');

const [scriptPath, scenarioPath] = process.argv.slice(2);
const scenario = JSON.parse(fs.readFileSync(scenarioPath, 'utf8'));

// cluster: {
//   members: {"<host:port>": {setName: string|null, arbiter: bool, unreachableFor: attempts, router: bool}},
//                                     router: a mongos (hello says msg "isdbgrid", no set)
//   root: {user, password},           the root user the members know
//   users: {"<name>": {roles, mechanisms}},
//   roles: {"<name>": {privileges, roles}},  user-defined roles in admin (optional)
//   statusError: {code, codeName}|null,  replSetGetStatus refuses with this
//   electionPolls: n,                 replica-set connections that find no primary after initiation
//   localReplsetDocs: n,              documents in local.system.replset of the bootstrap instance
//   defaultWriteConcern: object|null, config: object|null
// }
const cluster = scenario.cluster;
const calls = [];
const connections = [];
const printed = [];
let clock = 0;

class MongoServerError extends Error {
  constructor(code, codeName, message) {
    super(message);
    this.code = code;
    this.codeName = codeName;
  }
}

function parseUrl(url) {
  const match = /^mongodb:\/\/(?:([^:@/]+):([^@/]+)@)?([^/]+)\/\?(.*)$/.exec(url);
  if (!match) {
    throw new Error(`fake mongosh: cannot parse ${url}`);
  }
  const options = Object.fromEntries(match[4].split('&').map((pair) => pair.split('=').map(decodeURIComponent)));
  return {
    user: match[1] && decodeURIComponent(match[1]),
    password: match[2] && decodeURIComponent(match[2]),
    hosts: match[3].split(','),
    options: options,
  };
}

function primaryHost() {
  return Object.keys(cluster.members).find((host) => cluster.members[host].setName && !cluster.members[host].arbiter);
}

function execute(connection, database, body) {
  const name = Object.keys(body)[0];
  const target = connection.target;
  const member = cluster.members[target];
  calls.push({ host: target, database: database, command: name, body: body });
  switch (name) {
    case 'ping':
      return { ok: 1 };
    case 'hello': {
      if (member.router) {
        return { ok: 1, isWritablePrimary: true, msg: 'isdbgrid' };
      }
      const primary = member.setName && target === primaryHost();
      const answer = { ok: 1, isWritablePrimary: Boolean(primary), secondary: Boolean(member.setName && !primary && !member.arbiter) };
      if (member.setName) {
        answer.setName = member.setName;
      }
      return answer;
    }
    case 'replSetGetStatus':
      if (cluster.statusError) {
        throw new MongoServerError(cluster.statusError.code, cluster.statusError.codeName, 'refused');
      }
      if (!member.setName) {
        throw new MongoServerError(94, 'NotYetInitialized', 'no replset config has been received');
      }
      return { ok: 1, set: member.setName };
    case 'replSetInitiate': {
      if (Object.values(cluster.members).some((m) => m.setName)) {
        throw new MongoServerError(23, 'AlreadyInitialized', 'already initialized');
      }
      const config = body.replSetInitiate;
      for (const entry of config.members) {
        if (!(entry.host in cluster.members)) {
          throw new MongoServerError(93, 'InvalidReplicaSetConfig', `unknown host ${entry.host}`);
        }
        cluster.members[entry.host].setName = config._id;
      }
      cluster.config = config;
      return { ok: 1 };
    }
    case 'setDefaultRWConcern':
      cluster.defaultWriteConcern = body.defaultWriteConcern;
      return { ok: 1 };
    case 'usersInfo': {
      const user = cluster.users[body.usersInfo.user];
      return { ok: 1, users: user ? [Object.assign({ user: body.usersInfo.user }, user)] : [] };
    }
    case 'createUser':
      if (body.createUser in cluster.users) {
        throw new MongoServerError(51003, 'Location51003', `User "${body.createUser}@admin" already exists`);
      }
      cluster.users[body.createUser] = { roles: body.roles, mechanisms: body.mechanisms || null, pwd: body.pwd };
      return { ok: 1 };
    case 'updateUser':
      if (!(body.updateUser in cluster.users)) {
        throw new MongoServerError(11, 'UserNotFound', `Could not find user "${body.updateUser}"`);
      }
      cluster.users[body.updateUser] = { roles: body.roles, mechanisms: body.mechanisms || null, pwd: body.pwd };
      return { ok: 1 };
    case 'rolesInfo': {
      const role = (cluster.roles || {})[body.rolesInfo.role];
      return { ok: 1, roles: role ? [Object.assign({ role: body.rolesInfo.role }, role)] : [] };
    }
    case 'createRole':
    case 'updateRole': {
      cluster.roles = cluster.roles || {};
      if ((name === 'createRole') === (body[name] in cluster.roles)) {
        throw new MongoServerError(name === 'createRole' ? 51002 : 31, name === 'createRole' ? 'Location51002' : 'RoleNotFound', `role ${body[name]}`);
      }
      cluster.roles[body[name]] = { privileges: body.privileges, roles: body.roles };
      return { ok: 1 };
    }
    default:
      throw new MongoServerError(59, 'CommandNotFound', `no such command: '${name}'`);
  }
}

class Database {
  constructor(connection, name) {
    this.connection = connection;
    this.name = name;
  }
  runCommand(body) {
    return execute(this.connection, this.name, body);
  }
  getSiblingDB(name) {
    return new Database(this.connection, name);
  }
  getCollection(name) {
    const count = this.name === 'local' && name === 'system.replset' ? cluster.localReplsetDocs : 0;
    return { countDocuments: () => count };
  }
}

class Mongo {
  constructor(url) {
    const parsed = parseUrl(url);
    connections.push({ hosts: parsed.hosts, options: parsed.options });
    if (parsed.options.replicaSet) {
      const primary = primaryHost();
      if (!primary || cluster.electionPolls > 0) {
        cluster.electionPolls = Math.max(0, cluster.electionPolls - 1);
        throw new Error('Server selection timed out after 5000 ms');
      }
      this.target = primary;
    } else {
      const host = parsed.hosts[0];
      const member = cluster.members[host];
      if (!member || member.unreachableFor > 0) {
        if (member) {
          member.unreachableFor -= 1;
        }
        throw new Error(`connect ECONNREFUSED ${host}`);
      }
      this.target = host;
    }
    if (parsed.user !== undefined && (parsed.user !== cluster.root.user || parsed.password !== cluster.root.password)) {
      throw new Error('Authentication failed.');
    }
  }
  getDB(name) {
    return new Database(this, name);
  }
  close() {}
}

const fakeFs = {
  readFileSync(path) {
    if (!(path in scenario.files)) {
      throw new Error(`ENOENT: no such file, open '${path}'`);
    }
    return scenario.files[path];
  },
};

const localInstance = Object.create(Mongo.prototype);
localInstance.target = 'localhost';
cluster.members.localhost = cluster.members.localhost || { setName: null, arbiter: false, unreachableFor: 0 };

const sandbox = {
  require: (name) => (name === 'fs' ? fakeFs : require(name)),
  process: { env: scenario.env },
  print: (...parts) => printed.push(parts.join(' ')),
  sleep: (ms) => {
    clock += ms;
  },
  Date: { now: () => clock },
  Mongo: Mongo,
  db: new Database(localInstance, 'test'),
};

let error = null;
try {
  vm.runInNewContext(fs.readFileSync(scriptPath, 'utf8'), sandbox, { filename: scriptPath });
} catch (thrown) {
  error = String(thrown && thrown.message ? thrown.message : thrown);
}
delete cluster.members.localhost;
process.stdout.write(
  JSON.stringify({ ok: error === null, error: error, printed: printed, calls: calls, connections: connections, cluster: cluster })
);
process.exitCode = error === null ? 0 : 1;
