// The quiesce of a sharded cluster's dump, from the mongo image (no harel in it): stop the balancer and pause
// every harel worker, wait until every live worker acknowledged, then resume both. It sends the commands of the
// harel SDK's pause (harel/pausing.py, the contract): the `harel_meta` document {_id: "pause", requested_at,
// reason}, `pause_requested` on every worker document, a worker's `paused_at` once it stopped; a worker is live
// while its `beat_at` is at most three heartbeats older than the server's $$NOW.
//
// Runs as `mongosh --nodb --quiet --norc pause-workers.js` from harel-backup.sh, through the routers
// (HAREL_BACKUP_ROUTERS), as HAREL_BACKUP_USER with the password in the file HAREL_BACKUP_PASSWORD_FILE names.
// HAREL_PAUSE_ACTION says what to do:
//   pause    stop the balancer (once its round ends) unless it is off, then request the pause; prints
//            `balancer: <mode before>` as soon as it is stopped and `pause: created|kept` (kept: one stood already)
//   hold     request the pause (again) and flag the worker documents: after a restore replaced harel_meta
//   wait     flag the worker documents and look again every second until every live worker acknowledged
//            (exit 0), or for HAREL_BACKUP_PAUSE_TIMEOUT seconds (exit 1, naming the workers that did not)
//   resume   lift the pause if HAREL_PAUSE_CREATED is `created`, and start the balancer again unless
//            HAREL_BALANCER_WAS is `off`; both are tried, the first failure named (exit 1)
// A command refused throws, so mongosh exits 1 with the reason on stderr.

const env = process.env;
for (const name of ['HAREL_BACKUP_ROUTERS', 'HAREL_BACKUP_USER', 'HAREL_BACKUP_PASSWORD_FILE', 'HAREL_BACKUP_DATABASE',
  'HAREL_PAUSE_ACTION']) {
  if (!env[name]) {
    throw new Error(`${name} must be set`);
  }
}

const PAUSE = 'pause';
const NOW = { $divide: [{ $subtract: ['$$NOW', new Date(0)] }, 1000] };
const heartbeat = Number(env.HAREL_BACKUP_HEARTBEAT_SECONDS || 5);
const timeout = Number(env.HAREL_BACKUP_PAUSE_TIMEOUT || 120);
const majority = { w: 'majority' };

let query = 'authSource=admin&serverSelectionTimeoutMS=30000';
if (env.HAREL_BACKUP_TLS_CA) {
  query += `&tls=true&tlsCAFile=${encodeURIComponent(env.HAREL_BACKUP_TLS_CA)}`;
}
const password = require('fs').readFileSync(env.HAREL_BACKUP_PASSWORD_FILE, 'utf8').trim();
const credentials = `${encodeURIComponent(env.HAREL_BACKUP_USER)}:${encodeURIComponent(password)}`;
const connection = new Mongo(`mongodb://${credentials}@${env.HAREL_BACKUP_ROUTERS}/?${query}`);
const admin = connection.getDB('admin');
const harel = connection.getDB(env.HAREL_BACKUP_DATABASE);

// A command's reply; a refusal (ok 0, a write error, a write concern error) throws, naming the command.
function run(db, command) {
  const reply = db.runCommand(command);
  const problem = (reply.writeErrors || [])[0] || reply.writeConcernError;
  if (reply.ok !== 1 || problem) {
    const why = (problem && problem.errmsg) || reply.errmsg || JSON.stringify(reply);
    throw new Error(`${Object.keys(command)[0]} refused: ${why}`);
  }
  return reply;
}

function flagWorkers() {
  run(harel, {
    update: 'workers',
    updates: [{ q: { pause_requested: { $ne: true } }, u: { $set: { pause_requested: true } }, multi: true }],
    writeConcern: majority,
  });
}

function liveWorkers() {
  const live = { $expr: { $gte: ['$beat_at', { $subtract: [NOW, 3 * heartbeat] }] } };
  const reply = run(harel, { find: 'workers', filter: live, projection: { paused_at: 1 }, sort: { _id: 1 } });
  return reply.cursor.firstBatch;
}

function pause() {
  const status = run(admin, { balancerStatus: 1 });
  if (status.mode !== 'off') {
    run(admin, { balancerStop: 1, maxTimeMS: timeout * 1000 });
  }
  print(`balancer: ${status.mode}`);
  hold();
}

function hold() {
  const reply = run(harel, {
    findAndModify: 'harel_meta',
    query: { _id: PAUSE },
    update: [{ $set: {
      requested_at: { $ifNull: ['$requested_at', NOW] },
      reason: { $ifNull: ['$reason', { $literal: `backup ${env.HAREL_BACKUP_JOB || ''}`.trim() }] },
    } }],
    upsert: true,
    new: false,
    writeConcern: majority,
  });
  flagWorkers();
  print(`pause: ${reply.value === null || reply.value === undefined ? 'created' : 'kept'}`);
}

function wait() {
  const deadline = Date.now() + timeout * 1000;
  for (;;) {
    flagWorkers(); // a worker that started since
    const live = liveWorkers();
    const waiting = live.filter((worker) => worker.paused_at === undefined || worker.paused_at === null);
    if (waiting.length === 0) {
      print(`harel-backup: ${live.length} live worker(s) paused${live.length ? `: ${live.map((w) => w._id).join(', ')}` : ''}`);
      return;
    }
    if (Date.now() >= deadline) {
      throw new Error(`${waiting.length} live worker(s) did not acknowledge the pause within ${timeout}s: `
        + waiting.map((w) => w._id).join(', '));
    }
    sleep(1000);
  }
}

function resume() {
  const failures = [];
  if (env.HAREL_PAUSE_CREATED === 'created') {
    try {
      run(harel, { delete: 'harel_meta', deletes: [{ q: { _id: PAUSE }, limit: 1 }], writeConcern: majority });
      run(harel, {
        update: 'workers',
        updates: [{
          q: { $or: [{ pause_requested: { $exists: true } }, { paused_at: { $exists: true } }] },
          u: { $unset: { pause_requested: '', paused_at: '' } },
          multi: true,
        }],
        writeConcern: majority,
      });
      print('harel-backup: workers resumed');
    } catch (error) {
      failures.push(`resuming the workers: ${error.message}`);
    }
  }
  if (env.HAREL_BALANCER_WAS && env.HAREL_BALANCER_WAS !== 'off') {
    try {
      run(admin, { balancerStart: 1, maxTimeMS: 60000 });
      print('harel-backup: balancer started');
    } catch (error) {
      failures.push(`starting the balancer: ${error.message}`);
    }
  }
  if (failures.length) {
    throw new Error(failures.join('; '));
  }
}

try {
  ({ pause, hold, wait, resume })[env.HAREL_PAUSE_ACTION]();
} finally {
  connection.close();
}
