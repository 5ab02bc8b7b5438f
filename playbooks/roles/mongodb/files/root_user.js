// Makes sure the user administrator exists with the given password; run on the primary, over localhost. Reads
// {user, password, previousPassword} from stdin so no password is on a command line. Prints "present" when it
// can authenticate with the password; "rotated" when only previousPassword (a rotation under way) works, after it
// set the new one; "created" when it created the user through the localhost exception (possible only while no
// user exists).
const AUTHENTICATION_FAILED = 18;
const { user, password, previousPassword } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const admin = db.getSiblingDB('admin');

function authenticates(secret) {
  try {
    admin.auth(user, secret);
    return true;
  } catch (error) {
    if (error.code !== AUTHENTICATION_FAILED) throw error;
    return false;
  }
}

if (authenticates(password)) {
  print('present');
} else if (previousPassword && authenticates(previousPassword)) {
  admin.updateUser(user, { pwd: password, mechanisms: ['SCRAM-SHA-256'] }, { w: 'majority' });
  print('rotated');
} else {
  try {
    admin.createUser({ user, pwd: password, roles: [{ role: 'root', db: 'admin' }], mechanisms: ['SCRAM-SHA-256'] });
  } catch (error) {
    throw new Error(
      `cannot authenticate as ${user} and cannot create it (${error.codeName ?? error.message}): users exist ` +
        'already, so the localhost exception is closed; mongodb_root_password must be the password of that user ' +
        '(or, during a rotation, mongodb_previous_root_password)',
    );
  }
  print('created');
}
