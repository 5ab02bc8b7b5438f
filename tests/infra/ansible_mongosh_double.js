// A stand-in for mongosh connected to one mongod over localhost, to run the mongodb role's scripts
// (playbooks/roles/mongodb/files/*.js) under Node.js in tests. It is a test double, not MongoDB: it offers the
// globals those scripts use (db, print, connect, require('fs') with the script's stdin) over one member held
// in memory, and answers the way a MongoDB 8.0 member does for these commands: mongosh throws a server refusal
// as an error carrying `code` and `codeName`; with authorization on, a connection that has not authenticated
// may only initiate the set and create the first user, and only while no user exists (the localhost exception).
//
//   node ansible_mongosh_double.js <script.js> <scenario.json>
//
// scenario.json: {"stdin": text, "member": {
//   setName: string|null, primary: bool, secondary: bool, primaryHost: string|null,
//   users: {"<name>": {password, roles: [{role, db}], mechanisms}},   all in the admin database
//   statuses: [[{name, stateStr, health}], ...],   replSetGetStatus's members, one list per call, the last repeating
//   initiateRefusal: {code, codeName}|null         replSetInitiate refuses with this
// }}
// Time is simulated: sleep(ms) advances the clock Date.now() reads, so waiting scripts run instantly.
// Prints one JSON document: {"ok", "error", "printed", "calls", "member"}; exits 1 when the script threw.
'use strict';

const fs = require('fs');
const vm = require('vm');

const [scriptPath, scenarioPath] = process.argv.slice(2);
const scenario = JSON.parse(fs.readFileSync(scenarioPath, 'utf8'));
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
      member.config = body.replSetInitiate;
      return { ok: 1 };
    }
    if (name === 'replSetGetStatus') {
      this.require(name);
      const members = member.statuses.length > 1 ? member.statuses.shift() : member.statuses[0];
      return { ok: 1, set: member.setName, members };
    }
    if (name === 'replSetStepDown') {
      this.require(name);
      if (!member.primary) throw refuse.notPrimary();
      member.primary = false;
      member.secondary = true;
      member.stepDown = body;
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
  JSON,
  Error,
  encodeURIComponent,
});

let error = null;
try {
  vm.runInContext(fs.readFileSync(scriptPath, 'utf8'), context, { filename: scriptPath });
} catch (thrown) {
  error = { message: String(thrown.message), code: thrown.code ?? null };
}
process.stdout.write(JSON.stringify({ ok: error === null, error, printed, calls, member }));
process.exit(error === null ? 0 : 1);
