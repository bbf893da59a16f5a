/**
 * The outbox's intents on real node:sqlite files in a temporary folder:
 * keys, intents kept across a reopen, the order of lanes, the principal,
 * the clock's high-water mark, the refusal of a corrupt row or a path with
 * a control character, and the server anchor. Opening a file (settings,
 * one writer, refusals) is in outbox-open.test.ts.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import {
  IntentConflictError,
  Outbox,
  OutboxCorruptError,
  newKey,
  type NewIntent,
} from './outbox.js';

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
  'a key names one request: the same again is that intent, another is refused',
  async (t) => {
    const outbox = Outbox.open(await tempFile(t));
    t.teardown(() => {
      outbox.close();
    });
    const key = newKey();
    const first = outbox.enqueue({ ...transfer(5), key });
    const same = outbox.enqueue({
      ...transfer(5),
      key: key.toUpperCase(),
      body: { amount: 5, to_account_id: 'b', from_account_id: 'a' },
    });
    t.notOk(same.created, 'the same request under the same key is the intent already stated');
    t.equal(same.intent.seq, first.intent.seq);
    t.throws(() => outbox.enqueue({ ...transfer(6), key }), IntentConflictError);
    t.throws(() => outbox.enqueue({ ...transfer(5), key, path: '/api/v1/accounts' }), {
      name: 'IntentConflictError',
      message: new RegExp(key),
    });
    t.equal(outbox.list().length, 1, 'nothing was added');
    t.throws(() => outbox.enqueue({ ...transfer(5), key: 'not-a-key' }), {
      name: 'RangeError',
      message: /UUIDv7/,
    });
    t.throws(
      () => outbox.enqueue({ ...transfer(5), key: '0190f2a4-1b2c-4d3e-8f40-123456789abc' }),
      {
        message: /UUIDv7/,
      },
    );
    t.throws(() => outbox.enqueue({ ...transfer(5), path: 'api/v1/transfers' }), /path/);
    // A path starting with two slashes names another host: the token would go there.
    t.throws(() => outbox.enqueue({ ...transfer(5), path: '//evil.example/x' }), {
      name: 'RangeError',
      message: /path must not start with "\/\/"/,
    });
    t.throws(() => outbox.enqueue({ ...transfer(5), path: '/api/v1/transfers?x=1' }), /query/);
    t.throws(() => outbox.enqueue({ ...transfer(5), lanes: [''] }), /lane/);
  },
);

void t.test('ready intents: one at a time per lane, in the order stated', async (t) => {
  const outbox = Outbox.open(await tempFile(t));
  t.teardown(() => {
    outbox.close();
  });
  const ab = outbox.enqueue(transfer(1, ['account:a', 'account:b'])).intent;
  const bc = outbox.enqueue(transfer(2, ['account:b', 'account:c'])).intent;
  const de = outbox.enqueue(transfer(3, ['account:d', 'account:e'])).intent;
  const free = outbox.enqueue(transfer(4, [])).intent;
  const ad = outbox.enqueue(transfer(5, ['account:a', 'account:d'])).intent;
  const seqs = (xs: { seq: number }[]) => xs.map((x) => x.seq);
  t.same(
    seqs(outbox.ready(0, new Set(), 10)),
    [ab.seq, de.seq, free.seq],
    'heads of lanes and the free intent',
  );
  t.same(seqs(outbox.ready(0, new Set([ab.seq]), 10)), [de.seq, free.seq], 'in flight is left out');
  t.same(seqs(outbox.ready(0, new Set(), 2)), [ab.seq, de.seq], 'at most the limit');
  t.equal(outbox.pendingCount(), 5);

  // A retry scheduled later keeps its lane blocked until then.
  outbox.recordRetry(ab.seq, 1, 500, '503 service_unavailable');
  t.same(seqs(outbox.ready(0, new Set(), 10)), [de.seq, free.seq]);
  t.equal(outbox.nextAttemptAt(), 0, 'the earliest attempt of any pending intent');
  const retried = outbox.get(ab.key);
  t.match(retried, { attempts: 1, nextAttemptAt: 500, lastError: '503 service_unavailable' });

  outbox.recordFinal(ab.seq, {
    attempts: 2,
    state: 'done',
    failure: null,
    answer: {
      status: 201,
      replayed: true,
      marked: true,
      headers: { location: '/x' },
      body: '{"id":"t"}',
    },
    now: 600,
  });
  outbox.recordFinal(de.seq, {
    attempts: 1,
    state: 'failed',
    failure: 'key_reuse',
    answer: {
      status: 422,
      replayed: false,
      marked: false,
      headers: {},
      body: '{"code":"idempotency_key_reuse"}',
    },
    now: 700,
  });
  t.same(
    seqs(outbox.ready(600, new Set(), 10)),
    [bc.seq, free.seq, ad.seq],
    'finished intents free their lanes',
  );
  t.match(outbox.get(ab.key), {
    state: 'done',
    attempts: 2,
    finishedAt: 600,
    answer: { status: 201, replayed: true, headers: { location: '/x' }, body: '{"id":"t"}' },
  });
  t.same(seqs(outbox.list({ state: 'failed' })), [de.seq]);
  t.same(seqs(outbox.list({ state: 'done' })), [ab.seq]);
  outbox.recordExpired(free.seq, 800);
  t.match(outbox.get(free.key), {
    state: 'failed',
    failure: 'expired',
    answer: null,
    finishedAt: 800,
  });
  t.equal(outbox.pendingCount(), 2);
  t.equal(outbox.get(newKey()), undefined);
  t.throws(() => {
    outbox.recordRetry(9_999, 1, 1, 'x');
  }, /no pending intent 9999/);
});

void t.test('the outbox belongs to the principal that first reached the server', async (t) => {
  const file = await tempFile(t);
  const outbox = Outbox.open(file);
  t.equal(outbox.principal(), undefined);
  outbox.bindPrincipal('p1');
  outbox.bindPrincipal('p1');
  t.throws(
    () => {
      outbox.bindPrincipal('p2');
    },
    { name: 'OutboxPrincipalError', message: /belongs to principal p1.*p2/ },
  );
  outbox.close();
  const again = Outbox.open(file);
  t.equal(again.principal(), 'p1');
  again.close();
});

void t.test('a corrupt row is reported by its number and column, never sent', async (t) => {
  const file = await tempFile(t);
  const outbox = Outbox.open(file);
  const good = outbox.enqueue(transfer(1, ['account:a'])).intent;
  const bad = outbox.enqueue(transfer(2, ['account:z'])).intent;
  outbox.close();
  const corrupt = (sql: string, column: RegExp) => {
    const db = new DatabaseSync(file);
    db.exec(sql);
    db.close();
    const o = Outbox.open(file);
    t.throws(() => o.list(), { name: 'OutboxCorruptError', message: column });
    t.throws(() => o.ready(0, new Set(), 10), OutboxCorruptError);
    t.match(o.get(good.key), { seq: good.seq }, 'a sound row still reads');
    o.close();
  };
  corrupt(
    `update intents set body = '{"amount":' where seq = ${String(bad.seq)}`,
    new RegExp(`row ${String(bad.seq)}.*body`),
  );
  corrupt(
    `update intents set body = '{"amount":2}', key = 'nope' where seq = ${String(bad.seq)}`,
    /key/,
  );
  corrupt(
    `update intents set key = '${newKey()}', lanes = '[1]' where seq = ${String(bad.seq)}`,
    /lanes/,
  );
  corrupt(
    `update intents set lanes = '[]', method = 'GET' where seq = ${String(bad.seq)}`,
    /method/,
  );
  corrupt(
    `update intents set method = 'POST', answer_headers = 'x', status = 201, answer_body = '' where seq = ${String(bad.seq)}`,
    /answer_headers/,
  );
});

void t.test('the high-water mark of time only rises and survives a reopen', async (t) => {
  const file = await tempFile(t);
  let now = 5_000;
  const outbox = Outbox.open(file, { clock: () => now });
  t.equal(outbox.highWater(), 0, 'nothing recorded yet');
  const { intent } = outbox.enqueue(transfer(1));
  t.equal(outbox.highWater(), 5_000, 'a stated intent records its time');
  now = 1_000;
  outbox.enqueue(transfer(2));
  t.equal(outbox.highWater(), 5_000, 'an earlier clock does not lower it');
  outbox.recordAttempt(intent.seq, 1, 7_000);
  t.equal(outbox.highWater(), 7_000, 'an attempt records its start');
  outbox.observeTime(6_000);
  t.equal(outbox.highWater(), 7_000);
  outbox.observeTime(9_000);
  t.equal(outbox.highWater(), 9_000, 'a later time seen elsewhere raises it');
  outbox.recordFinal(intent.seq, {
    attempts: 1,
    state: 'done',
    failure: null,
    answer: { status: 201, replayed: false, marked: true, headers: {}, body: '{}' },
    now: 10_000,
  });
  t.equal(outbox.highWater(), 10_000, 'a final answer records its time');
  outbox.close();
  const again = Outbox.open(file);
  t.equal(again.highWater(), 10_000);
  again.close();
});

void t.test(
  'a path with a control character is refused, stated or read, as a URL parser drops tab, CR and LF',
  async (t) => {
    const file = await tempFile(t);
    const outbox = Outbox.open(file);
    // new URL('/\t/evil.example/x', origin) is http://evil.example/x.
    for (const path of ['/\t/evil.example/x', '/\r/evil.example/x', '/\n/evil.example/x']) {
      t.throws(() => outbox.enqueue({ ...transfer(5), path }), {
        name: 'RangeError',
        message: /control character/,
      });
    }
    for (const path of ['/api/v1/trans\u0000fers', '/api/v1/transfers\u007f', '/a\u001fb']) {
      t.throws(() => outbox.enqueue({ ...transfer(5), path }), /control character/);
    }
    t.equal(outbox.list().length, 0, 'nothing was stated');
    const { intent } = outbox.enqueue(transfer(5));
    outbox.close();
    const db = new DatabaseSync(file);
    db.prepare('update intents set path = ? where seq = ?').run('/\t/evil.example/x', intent.seq);
    db.close();
    const o = Outbox.open(file);
    t.throws(() => o.ready(0, new Set(), 10), {
      name: 'OutboxCorruptError',
      message: new RegExp(`row ${String(intent.seq)} .*path`),
    });
    o.close();
  },
);

void t.test(
  'the server anchor is kept only at the first attempt, never at a later one',
  async (t) => {
    const file = await tempFile(t);
    const outbox = Outbox.open(file);
    const later = outbox.enqueue(transfer(1, ['1'])).intent;
    // A first attempt while no server time was known: no anchor.
    outbox.recordAttempt(later.seq, 1, 1_000);
    outbox.recordRetry(later.seq, 1, 2_000, '503');
    outbox.recordAttempt(later.seq, 2, 2_000, 1_900);
    t.equal(outbox.get(later.key)?.serverAnchor, null, 'a later attempt sets none');
    // An attempt cut off (no count, as a version 1 row migrated) is an attempt too.
    const cut = outbox.enqueue(transfer(2, ['2'])).intent;
    outbox.recordAttempt(cut.seq, 0, 1_000);
    outbox.recordAttempt(cut.seq, 1, 3_000, 2_900);
    t.equal(outbox.get(cut.key)?.serverAnchor, null, 'nor one after an attempt cut off');
    const first = outbox.enqueue(transfer(3, ['3'])).intent;
    outbox.recordAttempt(first.seq, 1, 4_000, 3_900);
    t.equal(outbox.get(first.key)?.serverAnchor, 3_900, 'the first attempt sets it');
    outbox.recordRetry(first.seq, 1, 5_000, '503');
    outbox.recordAttempt(first.seq, 2, 5_000, 4_900);
    t.equal(outbox.get(first.key)?.serverAnchor, 3_900, 'and it stays');
    outbox.close();
  },
);
