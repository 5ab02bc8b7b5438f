// Records one backup run's outcome in <database>.backups (the status document of this backup job; its fields
// are described in the harel SDK, harel/backups.py). Runs as `mongosh --nodb --quiet --norc record-backup.js`
// as the last step of harel-backup.sh, with the backup user, whose only write privilege is on that
// collection. Everything comes from the environment harel-backup.sh sets, the password from the file
// HAREL_BACKUP_PASSWORD_FILE names: it never reaches a command line or an environment variable.

const env = process.env;
// A sharded cluster is reached through its routers (HAREL_BACKUP_ROUTERS), a replica set through its members.
const where = env.HAREL_BACKUP_ROUTERS ? ['HAREL_BACKUP_ROUTERS'] : ['HAREL_BACKUP_HOSTS', 'HAREL_BACKUP_REPLICA_SET'];
for (const name of [...where, 'HAREL_BACKUP_USER', 'HAREL_BACKUP_PASSWORD_FILE',
  'HAREL_BACKUP_DATABASE', 'HAREL_BACKUP_JOB', 'HAREL_BACKUP_TARGET', 'HAREL_RUN_ID', 'HAREL_RUN_OUTCOME']) {
  if (!env[name]) {
    throw new Error(`${name} must be set`);
  }
}

const run = {
  run_id: env.HAREL_RUN_ID,
  started_at: Number(env.HAREL_RUN_STARTED_AT),
  finished_at: Number(env.HAREL_RUN_FINISHED_AT),
  outcome: env.HAREL_RUN_OUTCOME,
  archive: env.HAREL_RUN_ARCHIVE || null,
  target: env.HAREL_BACKUP_TARGET,
  bytes: Number(env.HAREL_RUN_BYTES || 0),
  kept: Number(env.HAREL_RUN_KEPT || 0),
  error: env.HAREL_RUN_ERROR || null,
};
const succeeded = run.outcome === 'succeeded';

let query = 'authSource=admin&serverSelectionTimeoutMS=30000';
if (!env.HAREL_BACKUP_ROUTERS) {
  query = `replicaSet=${env.HAREL_BACKUP_REPLICA_SET}&${query}`;
}
if (env.HAREL_BACKUP_TLS_CA) {
  query += `&tls=true&tlsCAFile=${encodeURIComponent(env.HAREL_BACKUP_TLS_CA)}`;
}
// The password comes from a file (harel-backup.sh hands its own file, or a private copy, to this script).
const password = require('fs').readFileSync(env.HAREL_BACKUP_PASSWORD_FILE, 'utf8').trim();
const credentials = `${encodeURIComponent(env.HAREL_BACKUP_USER)}:${encodeURIComponent(password)}`;
const hosts = env.HAREL_BACKUP_ROUTERS || env.HAREL_BACKUP_HOSTS;
const connection = new Mongo(`mongodb://${credentials}@${hosts}/?${query}`);

const update = { $set: { last_attempt: run, updated_at: Date.now() / 1000 } };
if (succeeded) {
  update.$set.last_success = run;
  update.$set.failures_in_a_row = 0;
} else {
  update.$inc = { failures_in_a_row: 1 };
}
const reply = connection.getDB(env.HAREL_BACKUP_DATABASE).runCommand({
  update: 'backups',
  updates: [{ q: { _id: env.HAREL_BACKUP_JOB }, u: update, upsert: true }],
  writeConcern: { w: 'majority' },
});
connection.close();
// A write error does not throw: the reply carries it.
const problem = (reply.writeErrors || [])[0] || reply.writeConcernError;
if (problem) {
  throw new Error(`recording the backup run failed: ${problem.errmsg}`);
}
print(`harel-backup: recorded ${run.outcome} run ${run.run_id} as ${env.HAREL_BACKUP_JOB} in ${env.HAREL_BACKUP_DATABASE}.backups`);
