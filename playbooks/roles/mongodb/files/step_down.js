// Steps this member down from primary so it can be restarted without an unplanned election. Gives the
// secondaries up to 30 s to catch up and keeps this member from standing for election for 60 s, long enough
// for its restart. Reads {user, password} of the user administrator from stdin.
const { user, password } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
db.getSiblingDB('admin').auth(user, password);
db.adminCommand({ replSetStepDown: 60, secondaryCatchUpPeriodSecs: 30 });
print('stepped down');
