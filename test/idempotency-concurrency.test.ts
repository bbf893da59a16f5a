/**
 * Concurrency of keyed requests over real sockets and real parallel
 * transactions on PostgreSQL 18. Duplicates meet in one process's memory
 * (same instance) or at the key's primary key in PostgreSQL (two instances,
 * as two api processes would).
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import type { App } from '../apps/server/app.js';
import { secondInstance, startTestApp, type TestApp, type TestPrincipal } from './harness/app.js';

async function listen(app: App): Promise<string> {
  return app.http.listen({ host: '127.0.0.1', port: 0 });
}

async function post(base: string, who: TestPrincipal, key: string, body: unknown) {
  const res = await fetch(`${base}/api/v1/effects`, {
    method: 'POST',
    headers: { ...who.headers, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    replay: res.headers.get('idempotent-replay'),
    retryAfter: res.headers.get('retry-after'),
    bytes: Buffer.from(await res.arrayBuffer()),
  };
}

async function waitFor(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('condition not reached');
}

/** Lock waits in PostgreSQL (pg_locks is readable by every role). */
async function lockWaits(k: TestApp): Promise<number> {
  const [row] = await k.tdb.owner<
    { n: string }[]
  >`select count(*) as n from pg_locks where not granted`;
  return Number(row?.n);
}

void t.test(
  '64 parallel identical requests over two instances: one effect, others byte-identical replays or 409',
  async (t) => {
    const k = await startTestApp(t);
    const other = await secondInstance(t, k);
    const bases = [await listen(k.app), await listen(other)];
    const key = newId();
    const answers = await Promise.all(
      Array.from({ length: 64 }, (_, i) =>
        post(bases[i % 2] ?? '', k.alice, key, { label: 'burst' }),
      ),
    );
    t.equal((await k.effects()).length, 1, 'exactly one effect row');
    const firsts = answers.filter((a) => a.status === 201 && a.replay === 'false');
    t.equal(firsts.length, 1, 'exactly one first answer');
    for (const a of answers) {
      if (a.status === 201) {
        t.same(a.bytes, firsts[0]?.bytes, 'a 201 is the first answer or its byte-identical replay');
      } else {
        t.equal(a.status, 409, 'anything else is request_in_progress');
        t.match(a.bytes.toString(), /request_in_progress/);
      }
    }
    t.equal(k.calls.get('createEffect'), 1, 'the handler ran once');
    const outcomes = ['stored', 'replayed', 'in_progress'].map(
      (o) =>
        k.metrics.value('idempotency_requests_total', { route: 'createEffect', outcome: o }) ?? 0,
    );
    t.equal(
      outcomes.reduce((a, b) => a + b, 0),
      64,
      'every request ended in exactly one outcome',
    );
  },
);

void t.test(
  'a repeat from another instance waits at the key, gets 409 with Retry-After after the lock timeout, stores nothing',
  async (t) => {
    const env = { DATABASE__LOCK_TIMEOUT: '150ms' };
    const k = await startTestApp(t, { env });
    const other = await secondInstance(t, k, { env });
    const base = await listen(k.app);
    const otherBase = await listen(other);
    const key = newId();
    const first = post(base, k.alice, key, { label: 'slow', gate: 'slow' });
    await k.gates.entered('slow');
    const second = await post(otherBase, k.alice, key, { label: 'slow', gate: 'slow' });
    t.equal(second.status, 409);
    t.equal(second.retryAfter, '1');
    t.match(second.bytes.toString(), /"code":"request_in_progress"/);
    const local = await post(base, k.alice, key, { label: 'slow', gate: 'slow' });
    t.equal(local.status, 409, 'a repeat in the same process waits in memory and also gets 409');
    t.equal(local.retryAfter, '1');
    t.same(await k.keys(), [], 'nothing is stored (the first is still uncommitted)');
    k.gates.release('slow');
    const firstAnswer = await first;
    t.equal(firstAnswer.status, 201);
    const third = await post(otherBase, k.alice, key, { label: 'slow', gate: 'slow' });
    t.equal(third.status, 201);
    t.equal(third.replay, 'true');
    t.same(third.bytes, firstAnswer.bytes);
    t.equal((await k.effects()).length, 1);
    t.equal(k.calls.get('createEffect'), 1);
  },
);

void t.test(
  'a duplicate waiting at the key in PostgreSQL while the first ends in a final 404 gets the stored 404',
  async (t) => {
    const k = await startTestApp(t);
    const other = await secondInstance(t, k);
    const base = await listen(k.app);
    const otherBase = await listen(other);
    const key = newId();
    const body = { label: 'nf', outcome: 'not_found', gate: 'nf' };
    const first = post(base, k.alice, key, body);
    await k.gates.entered('nf');
    const second = post(otherBase, k.alice, key, body);
    await waitFor(async () => (await lockWaits(k)) >= 1);
    k.gates.release('nf');
    const [a, b] = await Promise.all([first, second]);
    t.equal(a.status, 404);
    t.equal(b.status, 404);
    t.equal(b.replay, 'true');
    t.same(b.bytes, a.bytes);
    t.equal(k.calls.get('createEffect'), 1, 'no second run');
    t.same(await k.effects(), [], 'the 404 left no effect');
  },
);

void t.test(
  'duplicates in one process wait in memory, not on pool connections: other callers are served meanwhile',
  async (t) => {
    const k = await startTestApp(t, {
      env: { DATABASE__POOL_MAX: '4', DATABASE__LOCK_TIMEOUT: '20s' },
    });
    const base = await listen(k.app);
    const key = newId();
    const first = post(base, k.alice, key, { label: 'held', gate: 'held' });
    await k.gates.entered('held');
    const duplicates = Array.from({ length: 8 }, () =>
      post(base, k.alice, key, { label: 'held', gate: 'held' }),
    );
    await waitFor(() =>
      Promise.resolve((k.metrics.value('idempotency_local_waiters', {}) ?? 0) >= 8),
    );
    t.equal(await lockWaits(k), 0, 'no duplicate waits inside PostgreSQL holding a connection');
    const me = await fetch(`${base}/api/v1/me`, { headers: k.bob.headers });
    t.equal(me.status, 200, "another principal's request is served while the duplicates wait");
    k.gates.release('held');
    const answers = [await first, ...(await Promise.all(duplicates))];
    t.equal(answers.filter((a) => a.status === 201 && a.replay === 'false').length, 1);
    t.equal(answers.filter((a) => a.replay === 'true').length, 8, 'every duplicate got the replay');
    t.equal((await k.effects()).length, 1);
  },
);
