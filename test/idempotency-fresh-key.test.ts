/**
 * What a key costs and how a repeat is answered without a read before the
 * attempt (01-idempotency.md, "Algorithm", step 1): through Fastify on a
 * real PostgreSQL, the application's pool behind a forwarder that counts
 * the client's writes to PostgreSQL.
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { secondInstance, startTestApp, type TestApp } from './harness/app.js';
import { startForwarder, type Forwarder } from './harness/forwarder.js';

async function throughForwarder(
  t: Parameters<typeof startTestApp>[0],
  env: Record<string, string> = {},
): Promise<{ k: TestApp; forwarder: Forwarder }> {
  const forwarder = await startForwarder(1);
  t.teardown(() => forwarder.close());
  const k = await startTestApp(t, {
    env,
    appUrl: (url) => {
      const u = new URL(url);
      forwarder.switchTo(Number(u.port));
      u.port = String(forwarder.port);
      return u.toString();
    },
  });
  return { k, forwarder };
}

function post(k: TestApp, url: string, body: unknown, key?: string) {
  return k.app.http.inject({
    method: 'POST',
    url,
    headers: {
      ...k.alice.headers,
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
    },
    payload: JSON.stringify(body),
  });
}

void t.test(
  'a fresh key costs one write to PostgreSQL more than the same request without a key, and no read before its attempt',
  async (t) => {
    const { k, forwarder } = await throughForwarder(t);
    // Prepares every statement and fills the token cache.
    for (let i = 0; i < 3; i++) {
      t.equal((await post(k, '/api/v1/effects', { label: `warm-${String(i)}` })).statusCode, 201);
      t.equal(
        (await post(k, '/api/v1/effects', { label: `warmk-${String(i)}` }, newId())).statusCode,
        201,
      );
    }
    // The least of several rounds: a background statement of the process
    // (the key statistics, the credential listener) only ever adds writes.
    let unkeyed = Infinity;
    let keyed = Infinity;
    for (let i = 0; i < 5; i++) {
      let before = forwarder.clientChunks();
      t.equal((await post(k, '/api/v1/effects', { label: `u-${String(i)}` })).statusCode, 201);
      unkeyed = Math.min(unkeyed, forwarder.clientChunks() - before);
      before = forwarder.clientChunks();
      const res = await post(k, '/api/v1/effects', { label: `k-${String(i)}` }, newId());
      t.equal(res.statusCode, 201);
      t.equal(res.headers['idempotent-replay'], 'false');
      keyed = Math.min(keyed, forwarder.clientChunks() - before);
    }
    t.equal(keyed - unkeyed, 1, `unkeyed ${String(unkeyed)} writes, keyed ${String(keyed)}`);
  },
);

void t.test(
  'a repeat this process answered first is replayed from memory, without a statement',
  async (t) => {
    const { k, forwarder } = await throughForwarder(t);
    const key = newId();
    const first = await post(k, '/api/v1/effects', { label: 'mine' }, key);
    t.equal(first.statusCode, 201);
    const before = forwarder.clientChunks();
    const again = await post(k, '/api/v1/effects', { label: 'mine' }, key);
    t.equal(again.headers['idempotent-replay'], 'true');
    t.same(again.rawPayload, first.rawPayload, 'byte for byte');
    t.equal(again.headers.location, first.headers.location);
    t.equal(forwarder.clientChunks() - before, 0, 'nothing sent to PostgreSQL');
    const reuse = await post(k, '/api/v1/effects', { label: 'other' }, key);
    t.equal(reuse.statusCode, 422, 'another body under the key, from memory too');
    t.equal(forwarder.clientChunks() - before, 0, 'nothing sent to PostgreSQL');
    t.equal(k.calls.get('createEffect'), 1);
  },
);

void t.test(
  'a replay that misses the cache is byte-identical, answered before validation, and leaves nothing behind',
  async (t) => {
    const k = await startTestApp(t);
    const other = await secondInstance(t, k);
    const key = newId();
    // A stored 400: the body fails the route's schema.
    const invalid = await post(k, '/api/v1/effects', { label: '' }, key);
    t.equal(invalid.statusCode, 400);
    const okKey = newId();
    const first = await post(k, '/api/v1/effects', { label: 'one' }, okKey);
    t.equal(first.statusCode, 201);
    const keysBefore = await k.keys();
    const effectsBefore = await k.effects();
    // The other process has read neither key: its insert meets each row.
    const inject = (label: string, id: string) =>
      other.http.inject({
        method: 'POST',
        url: '/api/v1/effects',
        headers: {
          ...k.alice.headers,
          'content-type': 'application/json',
          'idempotency-key': id,
        },
        payload: JSON.stringify({ label }),
      });
    const replayed = await inject('one', okKey);
    t.equal(replayed.statusCode, 201);
    t.equal(replayed.headers['idempotent-replay'], 'true');
    t.same(replayed.rawPayload, first.rawPayload, 'byte for byte');
    t.equal(replayed.headers.location, first.headers.location);
    const replayed400 = await inject('', key);
    t.equal(replayed400.statusCode, 400);
    t.equal(replayed400.headers['idempotent-replay'], 'true', 'the stored 400, not a new one');
    t.same(
      replayed400.json<Record<string, unknown>>()['correlation_id'],
      invalid.headers['correlation-id'],
      'the first answer, with its correlation id',
    );
    const reuse = await inject('two', okKey);
    t.equal(reuse.statusCode, 422);
    t.equal(k.calls.get('createEffect'), 1, 'the handler ran once, in the first process');
    t.same(await k.keys(), keysBefore, 'the rows are as they were');
    t.same(await k.effects(), effectsBefore, 'no effect added');
    const open = await k.tdb.owner<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
       where datname = current_database() and state like 'idle in transaction%'`;
    t.equal(open[0]?.n, 0, 'no transaction left open');
  },
);

void t.test(
  'the completion of a key is a HOT update: no index entry is written for it',
  async (t) => {
    const k = await startTestApp(t);
    // In parallel, as under load: other inserts fill a page between a
    // key's insert and its completion.
    const N = 160;
    for (let round = 0; round < N / 16; round++) {
      const answers = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          post(k, '/api/v1/effects', { label: `hot-${String(round)}-${String(i)}` }, newId()),
        ),
      );
      t.same(
        answers.map((a) => a.statusCode),
        answers.map(() => 201),
      );
    }
    // A session reports its counts at the latest when it ends.
    await k.app.close();
    let stats: { upd: number; hot: number } | undefined;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      [stats] = await k.tdb.owner<{ upd: number; hot: number }[]>`
        select n_tup_upd::int as upd, n_tup_hot_upd::int as hot
          from pg_stat_user_tables where relname = 'idempotency_keys'`;
      if ((stats?.upd ?? 0) >= N) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    t.equal(stats?.upd, N, 'one update per key');
    t.equal(stats?.hot, N, 'every one of them HOT');
  },
);
