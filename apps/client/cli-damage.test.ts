/**
 * A damaged outbox file: eight bytes overwritten in its header, in a page
 * of its intents table, of its pending index or of its lanes. Every
 * command, run in this process against a real HTTP server on 127.0.0.1,
 * ends with exit 4 and one line on standard error that names the file and
 * what to do, sends nothing and prints nothing; `outbox list` finds the
 * damage the sending commands find.
 */
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { EXIT, runCli } from './cli.js';
import { Outbox, OutboxDamagedError, OutboxError, storageError } from './outbox.js';

const ID_A = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
const ID_B = '0190f2a4-1b2c-7d3e-8f40-123456789abd';

/** Captures what a command writes. */
function io() {
  let out = '';
  let err = '';
  return {
    stdout: {
      write: (s: string, done?: (err?: Error | null) => void) => {
        out += s;
        done?.();
        return true;
      },
    },
    stderr: { write: (s: string) => ((err += s), true) },
    out: () => out,
    err: () => err,
  };
}

/** A server that counts what reaches it and answers as the API would. */
async function server(t: Test) {
  const seen: string[] = [];
  const srv = http.createServer((req, res) => {
    seen.push(`${req.method ?? ''} ${req.url ?? ''}`);
    req.resume();
    res.writeHead(req.url === '/api/v1/me' ? 200 : 503, { 'content-type': 'application/json' });
    res.end('{"id":"p1","kind":"user","display_name":"P"}');
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  t.teardown(() => {
    srv.closeAllConnections();
    srv.close();
  });
  const { port } = srv.address() as AddressInfo;
  return { base: `http://127.0.0.1:${String(port)}`, seen };
}

/** An outbox with settled and pending intents, closed (its log folded in). */
async function pristine(t: Test): Promise<{ dir: string; file: string }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-damage-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'pristine.sqlite');
  const outbox = Outbox.open(file);
  for (let i = 1; i <= 3; i += 1) {
    const { intent } = outbox.enqueue({
      operation: 'createTransfer',
      method: 'POST',
      path: '/api/v1/transfers',
      body: { from_account_id: ID_A, to_account_id: ID_B, amount: i },
      lanes: [`account:${ID_A}`],
    });
    if (i === 1) {
      outbox.recordFinal(intent.seq, {
        attempts: 1,
        state: 'done',
        failure: null,
        answer: { status: 201, replayed: false, marked: true, headers: {}, body: '{}' },
        now: Date.now(),
      });
    }
  }
  outbox.bindPrincipal('p1');
  outbox.close();
  return { dir, file };
}

/** Where each damage is: the first page of a table or index, by name, or the file's header. */
type Damage = 'header' | 'intents' | 'intents_pending' | 'intent_lanes';

function pageOffset(file: string, damage: Damage): number {
  if (damage === 'header') return 0;
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    const size = Number(db.prepare('pragma page_size').get()?.['page_size']);
    const row = db.prepare('select rootpage from sqlite_schema where name = ?').get(damage);
    const page = Number(row?.['rootpage']);
    if (!(page > 1)) throw new Error(`no page for ${damage}`);
    return (page - 1) * size;
  } finally {
    db.close();
  }
}

async function damaged(t: Test, damage: Damage): Promise<string> {
  const { dir, file } = await pristine(t);
  const copy = path.join(dir, `${damage}.sqlite`);
  await fs.copyFile(file, copy);
  const offset = pageOffset(copy, damage);
  const handle = await fs.open(copy, 'r+');
  await handle.write(Buffer.alloc(8, 0xff), 0, 8, offset);
  await handle.close();
  return copy;
}

const COMMANDS: readonly (readonly string[])[] = [
  ['outbox', 'list'],
  ['outbox', 'list', '--state', 'pending'],
  ['outbox', 'list', '--json'],
  ['outbox', 'drain'],
  ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '7'],
  ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '1', '--again'],
  ['accounts', 'create', '--name', 'Checking'],
];

for (const damage of ['header', 'intents', 'intents_pending', 'intent_lanes'] as const) {
  void t.test(`a damaged ${damage} page: every command is exit 4 in one line`, async (t) => {
    const srv = await server(t);
    for (const argv of COMMANDS) {
      const file = await damaged(t, damage);
      const o = io();
      const env = { CLIENT_OUTBOX: file, CLIENT_BASE_URL: srv.base, CLIENT_TOKEN: 'tok' };
      const code = await runCli(argv, env, o);
      const name = argv.join(' ');
      t.equal(code, EXIT.outbox, `${name}: exit 4 (${o.err()})`);
      t.equal(o.out(), '', `${name}: nothing on standard output`);
      // Progress may come first (a damaged lane is met when the sender
      // looks for what to send); the error is one line, the last.
      const lines = o.err().split('\n');
      t.equal(lines.pop(), '', `${name}: ends with a newline`);
      t.equal(lines.filter((l) => l.startsWith('client: ')).length, 1, `${name}: one error line`);
      const line = lines.at(-1) ?? '';
      t.match(line, /^client: /, `${name}: the error is the last line`);
      t.ok(line.includes(file), `${name}: the line names the file`);
      t.match(line, /damaged|not a database/, `${name}: says what is wrong`);
      t.match(line, /restore|move it aside/, `${name}: says what to do`);
      t.notMatch(o.err(), /a bug| {4}at /, `${name}: no stack`);
    }
    t.same(
      srv.seen.filter((s) => s.startsWith('POST')),
      [],
      'nothing is sent from a damaged outbox',
    );
  });
}

void t.test('a damaged page found by a query is an OutboxDamagedError', async (t) => {
  const file = await damaged(t, 'intents_pending');
  const outbox = Outbox.open(file);
  t.teardown(() => {
    outbox.close();
  });
  const err = t.throws(() => outbox.pendingCount()) as Error;
  t.ok(err instanceof OutboxDamagedError, err.message);
  t.ok(err instanceof OutboxError);
  t.throws(
    () => {
      outbox.check();
    },
    OutboxDamagedError,
    'the check finds it too',
  );
});

void t.test('each kind of SQLite failure gets its own advice in one line', (t) => {
  const file = '/x/outbox.sqlite';
  const sqlite = (errcode: number, message: string) =>
    Object.assign(new Error(message), { code: 'ERR_SQLITE_ERROR', errcode, errstr: message });
  for (const [errcode, what, advice] of [
    [11, /is damaged \(database disk image is malformed\)/, /restore it from a copy/],
    [779, /is damaged/, /move it aside/],
    [26, /is damaged/, /restore/],
    [13, /the disk is full/, /free space, then run the command again/],
    [8, /could not be written \(attempt to write a readonly database\)/, /must be writable/],
    [14, /could not be written/, /must be writable/],
    [778, /an I\/O error \(disk I\/O error\)/, /check the disk/],
    [1, /SQLite failed \(SQL logic error\)/, /run the command again/],
  ] as const) {
    const message =
      errcode === 8
        ? 'attempt to write a readonly database'
        : errcode === 778
          ? 'disk I/O error'
          : errcode === 1
            ? 'SQL logic error'
            : 'database disk image is malformed';
    const err = storageError(file, sqlite(errcode, message));
    t.ok(err instanceof OutboxDamagedError, String(errcode));
    const text = (err as Error).message;
    t.ok(text.startsWith(`outbox ${file}`), `${String(errcode)} names the file`);
    t.match(text, what);
    t.match(text, advice);
    t.notOk(text.includes('\n'), 'one line');
  }
  const other = new RangeError('not SQLite');
  t.equal(storageError(file, other), other, 'an error of another kind is left as it is');
  const own = new OutboxError('already the outbox');
  t.equal(storageError(file, own), own);
  t.end();
});
