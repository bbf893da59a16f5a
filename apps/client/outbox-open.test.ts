/**
 * Opening an outbox on real node:sqlite files in a temporary folder: the
 * durable settings of a new file, one writer per file (in this process and
 * from another one), and the refusals of a file that is no outbox, of
 * memory and other journal modes, and of a missing file for a reader.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { Outbox, OutboxLockedError, OutboxOpenError, newKey, type NewIntent } from './outbox.js';

const KEY = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function tempFile(t: Test, name = 'outbox.sqlite'): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-outbox-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return path.join(dir, name);
}

function transfer(amount: number, lanes: string[] = ['account:a', 'account:b']): NewIntent {
  return {
    operation: 'createTransfer',
    method: 'POST',
    path: '/api/v1/transfers',
    body: { to_account_id: 'b', from_account_id: 'a', amount },
    lanes,
  };
}
void t.test(
  'a new file is WAL, synchronous FULL, exclusively locked, and keeps intents',
  async (t) => {
    const file = await tempFile(t);
    let now = 1_000;
    const outbox = Outbox.open(file, { clock: () => now });
    t.same(outbox.storage(), {
      journalMode: 'wal',
      synchronous: 'full',
      lockingMode: 'exclusive',
      foreignKeys: true,
    });
    const { intent, created } = outbox.enqueue(transfer(2500));
    t.ok(created);
    t.match(intent.key, KEY, 'the key is a UUIDv7');
    t.equal(intent.createdAt, 1_000);
    t.equal(intent.state, 'pending');
    t.equal(intent.attempts, 0);
    t.equal(
      intent.body,
      '{"amount":2500,"from_account_id":"a","to_account_id":"b"}',
      'the body is kept in its RFC 8785 form, the bytes that will be sent',
    );
    now = 2_000;
    outbox.enqueue({ ...transfer(1), key: newKey(() => now) });
    outbox.close();
    t.throws(() => outbox.list(), /closed/, 'a closed outbox refuses work');

    const again = Outbox.open(file);
    t.same(
      again.list().map((i) => [i.key, i.state, i.createdAt]),
      [
        [intent.key, 'pending', 1_000],
        [again.list()[1]?.key, 'pending', 2_000],
      ],
      'both intents survive the reopen, in the order stated',
    );
    again.close();
    again.close();
  },
);

void t.test(
  'one writer per file: a second open is refused, in this process and another',
  async (t) => {
    const file = await tempFile(t);
    const outbox = Outbox.open(file);
    t.teardown(() => {
      outbox.close();
    });
    t.throws(() => Outbox.open(file), OutboxLockedError);
    t.throws(() => Outbox.open(file), { message: new RegExp(`${file}.*in use by another`) });
    // Another process, with SQLite itself: it cannot even read.
    const other = spawnSync(
      process.execPath,
      [
        '-e',
        `const { DatabaseSync } = require('node:sqlite');
       const db = new DatabaseSync(process.argv[1]);
       try { db.prepare('select count(*) from intents').get(); console.log('read'); }
       catch (e) { console.log(e.message); }`,
        file,
      ],
      {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', _TAPJS_PROCESSINFO_COVERAGE_: '0' },
      },
    );
    t.equal(other.stdout.trim(), 'database is locked', 'another process is locked out');
    outbox.close();
    const after = Outbox.open(file);
    t.pass('once closed, the file opens again');
    after.close();
  },
);

void t.test('a file that is no outbox is refused in one line naming it', async (t) => {
  const file = await tempFile(t, 'garbage.sqlite');
  await fs.writeFile(
    file,
    'this is not a database, just some bytes that go on for a while'.repeat(20),
  );
  t.throws(() => Outbox.open(file), OutboxOpenError);
  t.throws(() => Outbox.open(file), { message: new RegExp(`${file}.*not a database`) });
  const dir = path.dirname(file);
  t.throws(() => Outbox.open(dir), { name: 'OutboxOpenError', message: new RegExp(dir) });
  t.throws(() => Outbox.open(path.join(dir, 'missing', 'x.sqlite')), {
    name: 'OutboxOpenError',
    message: /cannot open/,
  });
  const foreign = path.join(dir, 'foreign.sqlite');
  const db = new DatabaseSync(foreign);
  db.exec('create table intents (x integer)');
  db.close();
  t.throws(() => Outbox.open(foreign), { name: 'OutboxOpenError', message: /not an outbox/ });
  const future = path.join(dir, 'future.sqlite');
  Outbox.open(future).close();
  const f = new DatabaseSync(future);
  f.exec(`update meta set value = '99' where name = 'schema_version'`);
  f.close();
  t.throws(() => Outbox.open(future), { name: 'OutboxOpenError', message: /version 99/ });
});

void t.test('an outbox is a WAL file: memory and other journal modes are refused', (t) => {
  t.throws(() => Outbox.open(':memory:'), {
    name: 'OutboxOpenError',
    message: /^cannot open outbox :memory:: an outbox in memory is lost with the process/,
  });
  t.throws(
    () => Outbox.open('file::memory:'),
    {
      name: 'OutboxOpenError',
      message: /^cannot open outbox file::memory:: a file: URI is not a file path/,
    },
    'a URI for memory is refused as a URI',
  );
  t.throws(
    () => Outbox.open('FILE:o.sqlite?nolock=1'),
    { name: 'OutboxOpenError', message: /a file: URI is not a file path/ },
    'a URI whose options would drop the lock is refused (node:sqlite reads file: names as URIs)',
  );
  t.throws(
    () => Outbox.open(''),
    { name: 'OutboxOpenError', message: /^cannot open outbox "": its journal mode is delete/ },
    'a temporary database is no WAL file either',
  );
  t.end();
});

void t.test('an outbox opened only if it exists is never created', async (t) => {
  const file = await tempFile(t, 'missing.sqlite');
  t.throws(() => Outbox.open(file, { create: false }), {
    name: 'OutboxOpenError',
    message: new RegExp(`^cannot open outbox ${file}: the file does not exist`),
  });
  await t.rejects(fs.access(file), { code: 'ENOENT' }, 'no file was made');
  await fs.writeFile(file, '');
  t.throws(() => Outbox.open(file, { create: false }), {
    name: 'OutboxOpenError',
    message: /is empty, not an outbox/,
  });
  t.equal((await fs.stat(file)).size, 0, 'an empty file is left empty');
  const bare = path.join(path.dirname(file), 'bare.sqlite');
  const db = new DatabaseSync(bare);
  db.exec('pragma user_version = 1');
  db.close();
  t.throws(
    () => Outbox.open(bare, { create: false }),
    { name: 'OutboxOpenError', message: /bare.sqlite: it is empty, not an outbox/ },
    'a database without tables is not made an outbox either',
  );
  Outbox.open(file).close();
  const existing = Outbox.open(file, { create: false });
  t.same(existing.list(), [], 'an existing outbox opens');
  existing.close();
});

void t.test(
  "an outbox another user could write is refused; one others could read is made the owner's alone",
  async (t) => {
    // The outbox holds intents the client sends with its user's token: a
    // row another user planted would be sent as this user's request.
    const open = await tempFile(t, 'open.sqlite');
    Outbox.open(open).close();
    await fs.chmod(open, 0o666);
    t.throws(() => Outbox.open(open), {
      name: 'OutboxOpenError',
      message:
        /^cannot open outbox .*open\.sqlite: other users may write it \(mode 0666\).*chmod 600/,
    });
    t.equal((await fs.stat(open)).mode & 0o777, 0o666, 'refused, left as it was');

    // An older client made its files 0644: readable by others, not
    // writable; the owner's own file is tightened as it is opened.
    const readable = await tempFile(t, 'readable.sqlite');
    Outbox.open(readable).close();
    await fs.chmod(readable, 0o644);
    Outbox.open(readable).close();
    t.equal((await fs.stat(readable)).mode & 0o777, 0o600, 'made 0600');

    // A symbolic link to a missing file: SQLite would make its target with
    // its default mode, readable by everyone.
    const link = await tempFile(t, 'link.sqlite');
    await fs.symlink(path.join(path.dirname(link), 'target.sqlite'), link);
    t.throws(() => Outbox.open(link), {
      name: 'OutboxOpenError',
      message: /^cannot open outbox .*link\.sqlite: it is a symbolic link to a missing file/,
    });
    await t.rejects(fs.stat(path.join(path.dirname(link), 'target.sqlite')), 'no target made');

    // A -wal file beside it that others may write: SQLite would read its
    // pages into the database as it opens it.
    const beside = await tempFile(t, 'beside.sqlite');
    Outbox.open(beside).close();
    await fs.writeFile(`${beside}-wal`, '');
    await fs.chmod(`${beside}-wal`, 0o666);
    t.throws(() => Outbox.open(beside), {
      name: 'OutboxOpenError',
      message:
        /^cannot open outbox .*beside\.sqlite: other users may write its -wal file \(mode 0666\)/,
    });

    if (process.getuid?.() === 0) {
      // A link another user owns could be pointed elsewhere after the check.
      const mine = await tempFile(t, 'mine.sqlite');
      Outbox.open(mine).close();
      const theirs = path.join(path.dirname(mine), 'theirs.sqlite');
      await fs.symlink(mine, theirs);
      await fs.lchown(theirs, 65534, 65534);
      t.throws(() => Outbox.open(theirs), {
        name: 'OutboxOpenError',
        message: /^cannot open outbox .*theirs\.sqlite: its symbolic link belongs to user 65534/,
      });
      // Made by another user first (in a shared directory such as /tmp).
      const foreign = await tempFile(t, 'foreign.sqlite');
      Outbox.open(foreign).close();
      await fs.chown(foreign, 65534, 65534);
      t.throws(() => Outbox.open(foreign), {
        name: 'OutboxOpenError',
        message:
          /^cannot open outbox .*foreign\.sqlite: it belongs to user 65534, not to this user \(0\)/,
      });
    } else {
      t.comment('not root: a file of another user cannot be made here, its refusal is not run');
    }
  },
);
