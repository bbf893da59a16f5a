/**
 * Schema version 4 on real files: whether the last answer of a pending
 * intent was unmarked (a 2xx or a stored status without
 * `Idempotent-Replay`, repeated once) is a column of its own, not a prefix
 * of its last error; a version 3 file upgrades to it when it is opened,
 * keeping what its last errors said; the sender reads the column, against a
 * real HTTP server on 127.0.0.1.
 */
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { Outbox } from './outbox.js';
import { Sender } from './sender.js';

const START = Date.parse('2026-06-01T10:00:00Z');
const BODY = '{"amount":5,"from_account_id":"a","to_account_id":"b"}';
const KEYS = [
  '0190f2a4-1b2c-7d3e-8f40-000000000001',
  '0190f2a4-1b2c-7d3e-8f40-000000000002',
  '0190f2a4-1b2c-7d3e-8f40-000000000003',
];

/** The schema of version 3, as the client wrote it before version 4. */
const V3_SCHEMA = `
create table meta (name text primary key, value text not null) strict;
create table intents (
  seq integer primary key autoincrement,
  key text not null unique,
  operation text not null,
  method text not null,
  path text not null,
  body text,
  lanes text not null,
  created_at integer not null,
  state text not null default 'pending' check (state in ('pending', 'done', 'failed')),
  failure text check (failure in ('key_reuse', 'expired', 'unexpected_answer', 'outcome_unknown')),
  attempts integer not null default 0,
  next_attempt_at integer not null default 0,
  attempt_started_at integer,
  server_anchor integer,
  reported_at integer,
  last_error text,
  status integer,
  replayed integer,
  marked integer check (marked in (0, 1)),
  answer_headers text,
  answer_body text,
  finished_at integer
) strict;
create index intents_pending on intents (seq) where state = 'pending';
create table intent_lanes (
  lane text not null,
  seq integer not null references intents (seq),
  primary key (lane, seq)
) strict, without rowid;
insert into meta (name, value) values ('schema_version', '3');
`;

async function tempFile(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-unmarked-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return path.join(dir, 'outbox.sqlite');
}

void t.test('a version 3 file upgrades: an unmarked last answer becomes a column', async (t) => {
  const file = await tempFile(t);
  const db = new DatabaseSync(file);
  db.exec('pragma journal_mode = wal');
  db.exec(V3_SCHEMA);
  const insert = db.prepare(
    `insert into intents (key, operation, method, path, body, lanes, created_at, state,
         attempts, last_error, reported_at)
       values (?, 'createTransfer', 'POST', '/api/v1/transfers', ?, '[]', 1_000, ?, 1, ?, ?)`,
  );
  insert.run(
    KEYS[0] ?? '',
    BODY,
    'pending',
    "unmarked answer: 201 without Idempotent-Replay, not the key's answer: repeated once with the same key",
    null,
  );
  insert.run(KEYS[1] ?? '', BODY, 'pending', '503 service_unavailable', null);
  insert.run(KEYS[2] ?? '', BODY, 'failed', 'unmarked answer: 201 ...', 1_200);
  const before = db.prepare('select * from intents order by seq').all();
  db.close();

  const outbox = Outbox.open(file);
  t.same(
    outbox.list().map((i) => i.unmarkedAnswer),
    [true, false, false],
    'a pending intent whose last error said so has an unmarked last answer',
  );
  outbox.close();

  const after = new DatabaseSync(file);
  t.equal(
    after.prepare(`select value from meta where name = 'schema_version'`).get()?.['value'],
    '5',
  );
  t.same(
    after
      .prepare('select * from intents order by seq')
      .all()
      .map((r) =>
        Object.fromEntries(
          Object.entries(r).filter(([k]) => k !== 'unmarked' && k !== 'key_lifetime_ms'),
        ),
      ),
    before,
    'every other column is as it was',
  );
  t.same(
    after
      .prepare(`select name from sqlite_master where type = 'index' and tbl_name = 'intents'`)
      .all()
      .map((r) => String(r['name']))
      .sort(),
    ['intents_pending', 'intents_unreported', 'sqlite_autoindex_intents_1'],
  );
  t.throws(
    () => {
      after.exec(`update intents set unmarked = 2 where seq = 1`);
    },
    /CHECK constraint/,
    'the column holds 0 or 1',
  );
  after.close();
});

void t.test('the column, not the text of the last error, records an unmarked answer', async (t) => {
  const file = await tempFile(t);
  const outbox = Outbox.open(file);
  t.teardown(() => {
    outbox.close();
  });
  const { intent } = outbox.enqueue({ operation: 'x', method: 'POST', path: '/x', lanes: [] });
  t.equal(intent.unmarkedAnswer, false, 'a new intent has none');
  outbox.recordRetry(intent.seq, 1, 0, '201 repeated once', { unmarked: true });
  t.match(outbox.get(intent.key), { unmarkedAnswer: true, lastError: '201 repeated once' });
  outbox.recordRetry(intent.seq, 2, 0, 'unmarked answer: only words');
  t.equal(outbox.get(intent.key)?.unmarkedAnswer, false, 'a retry without it clears it');
});

void t.test('the sender reads the column: a second unmarked answer is unknown', async (t) => {
  let posts = 0;
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.sendDate = false;
      if (req.url === '/api/v1/me') {
        res.writeHead(200, {
          'content-type': 'application/json; charset=utf-8',
          date: new Date(START).toUTCString(),
        });
        res.end('{"id":"p1","kind":"user","display_name":"P"}');
        return;
      }
      posts += 1;
      res.writeHead(201, { 'content-type': 'application/json; charset=utf-8' });
      res.end('{"id":"t"}');
    });
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  t.teardown(() => {
    srv.closeAllConnections();
    srv.close();
  });
  const { port } = srv.address() as AddressInfo;
  const file = await tempFile(t);
  const clock = { now: START };
  const outbox = Outbox.open(file, { clock: () => clock.now });
  t.teardown(() => {
    outbox.close();
  });
  const { intent } = outbox.enqueue({
    operation: 'createTransfer',
    method: 'POST',
    path: '/api/v1/transfers',
    body: { from_account_id: 'a', to_account_id: 'b', amount: 1 },
  });
  // An earlier drain met an unmarked 201; its last error says something else.
  outbox.recordAttempt(intent.seq, 1, START);
  outbox.recordRetry(intent.seq, 1, START, 'a note in other words', { unmarked: true });
  const sender = new Sender({
    outbox,
    baseUrl: `http://127.0.0.1:${String(port)}`,
    token: 'tok',
    keyTtlMs: 24 * 3_600_000,
    ttlMarginMs: 3_600_000,
    timeoutMs: 2_000,
    concurrency: 1,
    backoff: { baseMs: 100, capMs: 1_000, maxRetryAfterMs: 1_000 },
    clock: () => clock.now,
    random: () => 0.5,
    sleep: async (ms) => {
      clock.now += ms;
      await Promise.resolve();
    },
  });
  await sender.drain({ deadline: START + 60_000 });
  t.match(outbox.get(intent.key), { state: 'failed', failure: 'outcome_unknown', attempts: 2 });
  t.equal(posts, 1, 'one more attempt, then unknown');
});
