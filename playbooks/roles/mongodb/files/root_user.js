// Makes sure the user administrator exists; run on the primary, over localhost. Reads {user, password} from
// stdin so the password is never on a command line. Prints "present" when it can authenticate as that user,
// "created" when it created the user through the localhost exception (possible only while no user exists).
const AUTHENTICATION_FAILED = 18;
const { user, password } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const admin = db.getSiblingDB('admin');
let present = true;
try {
  admin.auth(user, password);
} catch (error) {
  if (error.code !== AUTHENTICATION_FAILED) throw error;
  present = false;
}
if (present) {
  print('present');
} else {
  try {
    admin.createUser({ user, pwd: password, roles: [{ role: 'root', db: 'admin' }], mechanisms: ['SCRAM-SHA-256'] });
  } catch (error) {
    throw new Error(
      `cannot authenticate as ${user} and cannot create it (${error.codeName ?? error.message}): users exist ` +
        'already, so the localhost exception is closed; mongodb_root_password must be the password of that user',
    );
  }
  print('created');
}
