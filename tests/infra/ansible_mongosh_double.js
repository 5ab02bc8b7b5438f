// A stand-in for mongosh, to run the mongodb role's scripts (playbooks/roles/mongodb/files/*.js) under Node.js
// where one fake member is not enough: a whole Ansible run over several inventory hosts on one machine sharing one
// replica set (members added, promoted, removed, a primary stepping down), the localhost exception, and the stdin
// each task renders. The scripts also run under the real mongosh against the fake replica set
// (tests/infra/test_ansible.py). It is a test double, not MongoDB: it offers the globals those
// scripts use (db, print, connect, EJSON, require('fs') with the script's stdin) over one replica set held in
// memory, and answers the way a MongoDB 8.0 member does for these commands: mongosh throws a server refusal as an
// error carrying `code` and `codeName`; with authorization on, a connection that has not authenticated may only
// initiate the set and create the first user, and only while no user exists (the localhost exception).
//
//   node ansible_mongosh_double.js <script.js> <scenario.json>
//     scenario.json: {"stdin": text, "member": {...}}; prints one JSON document {"ok", "error", "printed",
//     "calls", "member"} and exits 1 when the script threw.
//   node ansible_mongosh_double.js --state <member.json> [mongosh's options...] --eval <script text>
//     as the role runs mongosh: stdin is the script's stdin, the member is read from member.json and written back
//     after the script ran, so a whole Ansible run works on one replica set. Prints what the script printed;
//     exits 1 with the error on stderr when it threw.
//
// member: {
//   setName: string|null, primary: bool, secondary: bool, primaryHost: string|null,
//   users: {"<name>": {password, roles: [{role, db}], mechanisms}},   all in the admin database
//   config: the replica-set configuration (set by replSetInitiate, replaced by replSetReconfig)
//   statuses: [[{name, state, stateStr, health}], ...]   replSetGetStatus's members, one list per call, the last
//     repeating; when empty they follow the config: the primaryHost PRIMARY, every other member SECONDARY, except
//     the hosts listed in `down` (unreachable) and `syncing` (STARTUP2, still copying data)
//   initiateRefusal: {code, codeName}|null         replSetInitiate refuses with this
//   featureCompatibilityVersion: string
// }
// Time is simulated: sleep(ms) advances the clock Date.now() reads, so waiting scripts run instantly.
'use strict';

const fs = require('fs');
const vm = require('vm');

const cli = process.argv[2] === '--state';
const statePath = cli ? process.argv[3] : null;
const scriptPath = cli ? null : process.argv[2];
const scenario = cli
  ? { stdin: fs.readFileSync(0, 'utf8'), member: JSON.parse(fs.readFileSync(statePath, 'utf8')) }
  : JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const script = cli ? process.argv[process.argv.indexOf('--eval') + 1] : fs.readFileSync(scriptPath, 'utf8');
const member = scenario.member;
const calls = [];
const printed = [];
let clock = 0;

class MongoServerError extends Error {
  constructor(code, codeName, message) {
    super(message);
    this.code = code;
    this.codeName = codeName;
  }
}

const refuse = {
  unauthorized: (command) => new MongoServerError(13, 'Unauthorized', `command ${command} requires authentication`),
  authenticationFailed: () => new MongoServerError(18, 'AuthenticationFailed', 'Authentication failed.'),
  notPrimary: () => new MongoServerError(10107, 'NotWritablePrimary', 'not primary'),
};

// replSetGetStatus's members when the scenario gives none: what the configuration and the member lists say.
function statusFromConfig() {
  return (member.config?.members ?? []).map((m) => {
    if ((member.down ?? []).includes(m.host)) {
      return { name: m.host, state: 8, stateStr: '(not reachable/healthy)', health: 0 };
    }
    if ((member.syncing ?? []).includes(m.host)) return { name: m.host, state: 5, stateStr: 'STARTUP2', health: 1 };
    if (m.host === member.primaryHost) return { name: m.host, state: 1, stateStr: 'PRIMARY', health: 1 };
    return { name: m.host, state: 2, stateStr: 'SECONDARY', health: 1 };
  });
}

// replSetReconfig as a primary checks it: the same set, the next version, and at most one vote changed.
function reconfigure(config) {
  const invalid = (message) => new MongoServerError(103, 'NewReplicaSetConfigurationIncompatible', message);
  if (config._id !== member.config._id) throw invalid('the set name changed');
  if (config.version !== member.config.version + 1) {
    throw invalid(`version ${config.version} does not follow ${member.config.version}`);
  }
  const votes = (members) => Object.fromEntries(members.map((m) => [m.host, m.votes ?? 1]));
  const before = votes(member.config.members);
  const after = votes(config.members);
  const hosts = new Set([...Object.keys(before), ...Object.keys(after)]);
  const changed = [...hosts].reduce((sum, host) => sum + Math.abs((before[host] ?? 0) - (after[host] ?? 0)), 0);
  if (changed > 1) throw invalid(`${changed} votes changed at once; a reconfig may change one`);
  member.config = config;
  member.reconfigs = [...(member.reconfigs ?? []), config];
}

// One client connection: who it authenticated as, if anyone.
class Connection {
  constructor() {
    this.user = null;
  }

  authenticate(user, password) {
    const known = member.users[user];
    if (!known || known.password !== password) {
      throw refuse.authenticationFailed();
    }
    this.user = user;
  }

  // The localhost exception: no user yet, and only for what the exception allows.
  require(command, { underLocalhostException = false } = {}) {
    if (this.user !== null) return;
    if (underLocalhostException && Object.keys(member.users).length === 0) return;
    throw refuse.unauthorized(command);
  }

  adminCommand(body) {
    const name = Object.keys(body)[0];
    calls.push({ command: name, user: this.user });
    if (name === 'replSetInitiate') {
      this.require(name, { underLocalhostException: true });
      if (member.setName !== null) {
        throw new MongoServerError(23, 'AlreadyInitialized', 'already initialized');
      }
      if (member.initiateRefusal) {
        throw new MongoServerError(member.initiateRefusal.code, member.initiateRefusal.codeName, 'refused');
      }
      member.setName = body.replSetInitiate._id;
      member.config = { ...body.replSetInitiate, version: 1 };
      // The first member listed wins the election.
      member.primaryHost = member.primaryHost ?? body.replSetInitiate.members[0].host;
      member.primary = true;
      member.secondary = false;
      return { ok: 1 };
    }
    if (name === 'replSetGetStatus') {
      this.require(name);
      const statuses = member.statuses ?? [];
      const members = statuses.length > 1 ? statuses.shift() : statuses[0] ?? statusFromConfig();
      return { ok: 1, set: member.setName, members: members.length > 0 ? members : statusFromConfig() };
    }
    if (name === 'replSetGetConfig') {
      this.require(name);
      if (!member.config) throw new MongoServerError(94, 'NotYetInitialized', 'no replset config has been received');
      return { ok: 1, config: member.config };
    }
    if (name === 'replSetReconfig') {
      this.require(name);
      if (!member.primary) throw refuse.notPrimary();
      reconfigure(body.replSetReconfig);
      return { ok: 1 };
    }
    if (name === 'replSetStepDown') {
      this.require(name);
      if (!member.primary) throw refuse.notPrimary();
      member.stepDown = body;
      const successor = (member.config?.members ?? []).find(
        (m) => m.host !== member.primaryHost && (m.votes ?? 1) > 0 && !(member.down ?? []).includes(m.host),
      );
      if (successor) {
        member.primaryHost = successor.host;
      } else {
        member.primary = false;
        member.secondary = true;
      }
      return { ok: 1 };
    }
    throw new Error(`ansible_mongosh_double: no command ${name}`);
  }

  database(name) {
    const connection = this;
    return {
      getName: () => name,
      getSiblingDB: (other) => connection.database(other),
      getMongo: () => ({ close: () => calls.push({ command: 'close' }) }),
      hello() {
        calls.push({ command: 'hello', user: connection.user });
        return {
          setName: member.setName ?? undefined,
          isWritablePrimary: member.setName !== null && member.primary,
          secondary: member.secondary,
          primary: member.primaryHost ?? undefined,
        };
      },
      adminCommand: (body) => connection.adminCommand(body),
      runCommand(body) {
        const command = Object.keys(body)[0];
        if (command === 'getParameter') {
          calls.push({ command, user: connection.user });
          connection.require(command);
          return { ok: 1, featureCompatibilityVersion: { version: member.featureCompatibilityVersion } };
        }
        if (command === 'setFeatureCompatibilityVersion') {
          calls.push({ command, user: connection.user, confirm: body.confirm });
          connection.require(command);
          if (body.confirm !== true) throw new MongoServerError(7369100, 'Location7369100', 'confirm: true required');
          member.featureCompatibilityVersion = body.setFeatureCompatibilityVersion;
          return { ok: 1 };
        }
        return connection.adminCommand(body);
      },
      auth(user, password) {
        calls.push({ command: 'auth', user });
        connection.authenticate(user, password);
        return { ok: 1 };
      },
      createUser(document) {
        calls.push({ command: 'createUser', user: connection.user, name: document.user });
        connection.require('createUser', { underLocalhostException: name === 'admin' });
        if (!member.primary) throw refuse.notPrimary();
        if (member.users[document.user]) {
          throw new MongoServerError(51003, 'Location51003', `User "${document.user}@${name}" already exists`);
        }
        member.users[document.user] = {
          password: document.pwd,
          roles: document.roles,
          mechanisms: document.mechanisms ?? ['SCRAM-SHA-1', 'SCRAM-SHA-256'],
        };
        return { ok: 1 };
      },
      getUser(user) {
        calls.push({ command: 'usersInfo', user: connection.user, name: user });
        connection.require('usersInfo');
        const known = member.users[user];
        return known ? { user, db: name, roles: known.roles, mechanisms: known.mechanisms } : null;
      },
      updateUser(user, update) {
        calls.push({ command: 'updateUser', user: connection.user, name: user, fields: Object.keys(update).sort() });
        connection.require('updateUser');
        if (!member.primary) throw refuse.notPrimary();
        const known = member.users[user];
        if (update.roles) known.roles = update.roles;
        if (update.pwd) known.password = update.pwd;
        if (update.mechanisms) known.mechanisms = update.mechanisms;
        return { ok: 1 };
      },
    };
  }
}

// mongosh's connect(uri): a new connection, authenticated when the URI carries credentials.
function connect(uri) {
  calls.push({ command: 'connect' });
  const match = /^mongodb:\/\/(?:([^:@/]+):([^@/]+)@)?[^/]+\/([^?]*)/.exec(uri);
  if (!match) throw new Error(`ansible_mongosh_double: cannot parse ${uri}`);
  const connection = new Connection();
  if (match[1] !== undefined) {
    connection.authenticate(decodeURIComponent(match[1]), decodeURIComponent(match[2]));
  }
  return connection.database(match[3] || 'test');
}

const fakeFs = {
  readFileSync(path, encoding) {
    if (path !== 0 || encoding !== 'utf8') {
      throw new Error(`ansible_mongosh_double: the scripts read their stdin only, not ${path}`);
    }
    return scenario.stdin;
  },
};

const context = vm.createContext({
  db: new Connection().database('test'),
  connect,
  print: (...values) => printed.push(values.join(' ')),
  sleep: (milliseconds) => {
    calls.push({ command: 'sleep', milliseconds });
    clock += milliseconds;
  },
  Date: { now: () => clock },
  require: (name) => {
    if (name !== 'fs') throw new Error(`ansible_mongosh_double: no module ${name}`);
    return fakeFs;
  },
  // The documents here hold no BSON types, so Extended JSON is plain JSON; the real mongosh's round trip of the
  // config's ObjectId is left to the runs under mongosh.
  EJSON: { stringify: (value) => JSON.stringify(value), deserialize: (value) => value },
  JSON,
  Error,
  encodeURIComponent,
});

let error = null;
try {
  vm.runInContext(script, context, { filename: scriptPath ?? 'eval' });
} catch (thrown) {
  error = { message: String(thrown.message), code: thrown.code ?? null };
}
if (cli) {
  // Every host of an Ansible run starts its mongosh at once: a reader must never see half a file.
  const staged = `${statePath}.${process.pid}`;
  fs.writeFileSync(staged, JSON.stringify(member));
  fs.renameSync(staged, statePath);
  process.stdout.write(printed.map((line) => `${line}\n`).join(''));
  if (error !== null) process.stderr.write(`${error.message}\n`);
} else {
  process.stdout.write(JSON.stringify({ ok: error === null, error, printed, calls, member }));
}
process.exit(error === null ? 0 : 1);
