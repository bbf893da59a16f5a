/**
 * Schema version 4 on real files: whether the last answer of a pending
 * intent was unmarked (a 2xx or a stored status without
 * `Idempotent-Replay`, repeated once) is a column of its own, not a prefix
 * of its last error; a version 3 file upgrades to it when it is opened,
 * keeping what its last errors said; the sender reads the column, against a
 * real HTTP server on 127.0.0.1.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { DatabaseSync } from 'node:sqlite';
import t from 'tap';
import { Outbox } from './outbox.js';
import { BODY, KEYS, V3_SCHEMA, tempFile } from './outbox-schema-fixture.js';
import { Sender } from './sender.js';

const START = Date.parse('2026-06-01T10:00:00Z');
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
    '6',
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
