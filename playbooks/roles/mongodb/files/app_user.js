// Makes the application user exactly what the deployment expects: in the admin database, with readWrite on the
// application database and no other role, and with the given password. Authenticates as the user
// administrator. Reads {port, root: {user, password}, app: {user, password, database}, tls, tlsCAFile} from
// stdin so no password is on a command line; tls: whether the password check connects with TLS (the member's
// certificate names the member, not 127.0.0.1, so host names are not checked on that loopback connection).
// Prints {"changed": bool, "actions": [...]}.
const AUTHENTICATION_FAILED = 18;
const { port, root, app, tls, tlsCAFile } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const admin = db.getSiblingDB('admin');
admin.auth(root.user, root.password);

const wanted = [{ role: 'readWrite', db: app.database }];
const sameRoles = (roles) =>
  roles.length === wanted.length && roles.every((r) => r.role === wanted[0].role && r.db === wanted[0].db);

function passwordWorks() {
  const uri =
    `mongodb://${encodeURIComponent(app.user)}:${encodeURIComponent(app.password)}` +
    `@127.0.0.1:${port}/admin?directConnection=true&authMechanism=SCRAM-SHA-256` +
    (tls ? `&tls=true&tlsCAFile=${encodeURIComponent(tlsCAFile)}&tlsAllowInvalidHostnames=true` : '');
  try {
    connect(uri).getMongo().close();
    return true;
  } catch (error) {
    if (error.code === AUTHENTICATION_FAILED) return false;
    throw error;
  }
}

const actions = [];
const existing = admin.getUser(app.user);
if (existing === null) {
  admin.createUser({ user: app.user, pwd: app.password, roles: wanted, mechanisms: ['SCRAM-SHA-256'] });
  actions.push('created');
} else {
  if (!sameRoles(existing.roles)) {
    admin.updateUser(app.user, { roles: wanted });
    actions.push('roles');
  }
  if (!passwordWorks()) {
    admin.updateUser(app.user, { pwd: app.password, mechanisms: ['SCRAM-SHA-256'] });
    actions.push('password');
  }
}
print(JSON.stringify({ changed: actions.length > 0, actions }));
