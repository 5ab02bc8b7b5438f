// A stand-in for `mongosh --nodb --quiet --norc <script>` that runs a script under Node.js with the mongosh
// globals record-backup.js uses (Mongo, print, process.env, require('fs')) and writes every command it sends, with the URL it
// connected to, as JSON lines to $FAKE_MONGOSH_LOG. It is a test double, not MongoDB: each command is
// answered {ok: 1}; the test replays the recorded commands against the fake replica set.
//
//   node record_mongosh.js --nodb --quiet --norc <script.js>
'use strict';

const fs = require('fs');
const vm = require('vm');

const script = process.argv.slice(2).filter((argument) => !argument.startsWith('--'))[0];
const log = (entry) => fs.appendFileSync(process.env.FAKE_MONGOSH_LOG, `${JSON.stringify(entry)}\n`);

class Mongo {
  constructor(url) {
    this.url = url;
  }
  getDB(name) {
    return {
      runCommand: (body) => {
        log({ url: this.url, db: name, command: body });
        return { ok: 1, n: 1 };
      },
    };
  }
  close() {}
}

try {
  vm.runInNewContext(fs.readFileSync(script, 'utf8'), {
    Mongo,
    require,
    print: (...parts) => process.stdout.write(`${parts.join(' ')}\n`),
    process: { env: process.env },
    Date,
    Number,
    encodeURIComponent,
  });
} catch (error) {
  process.stderr.write(`MongoshError: ${error.message}\n`);
  process.exit(1);
}
