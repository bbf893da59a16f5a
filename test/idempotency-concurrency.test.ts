/**
 * Concurrency of keyed requests over real sockets and real parallel
 * transactions on PostgreSQL 18.
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { startTestApp, type TestApp, type TestPrincipal } from './harness/app.js';

async function listen(k: TestApp): Promise<string> {
  return k.app.http.listen({ host: '127.0.0.1', port: 0 });
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

void t.test(
  '64 parallel identical requests over real sockets: one effect, every other answer a byte-identical replay or 409',
  async (t) => {
    const k = await startTestApp(t);
    const base = await listen(k);
    const key = newId();
    const answers = await Promise.all(
      Array.from({ length: 64 }, () => post(base, k.alice, key, { label: 'burst' })),
    );
    const effects = await k.effects();
    t.equal(effects.length, 1, 'exactly one effect row');
    const firsts = answers.filter((a) => a.status === 201 && a.replay === null);
    t.equal(firsts.length, 1, 'exactly one first answer');
    const first = firsts[0]!;
    for (const a of answers) {
      if (a.status === 201) {
        t.same(a.bytes, first.bytes, 'a 201 is the first answer or its byte-identical replay');
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
  'a repeat while the first runs waits, gets 409 with Retry-After after the lock timeout, and stores nothing',
  async (t) => {
    const k = await startTestApp(t, { env: { DATABASE__LOCK_TIMEOUT: '150ms' } });
    const base = await listen(k);
    const key = newId();
    const first = post(base, k.alice, key, { label: 'slow', gate: 'slow' });
    await k.gates.entered('slow');
    const second = await post(base, k.alice, key, { label: 'slow', gate: 'slow' });
    t.equal(second.status, 409);
    t.equal(second.retryAfter, '1');
    t.match(second.bytes.toString(), /"code":"request_in_progress"/);
    t.same(await k.keys(), [], 'nothing is stored (the first is still uncommitted)');
    k.gates.release('slow');
    const firstAnswer = await first;
    t.equal(firstAnswer.status, 201);
    const third = await post(base, k.alice, key, { label: 'slow', gate: 'slow' });
    t.equal(third.status, 201);
    t.equal(third.replay, 'true');
    t.same(third.bytes, firstAnswer.bytes);
    t.equal((await k.effects()).length, 1);
    t.equal(k.calls.get('createEffect'), 1);
  },
);

void t.test(
  'a duplicate that waits while the first ends in a final 404 gets the stored 404 as a replay',
  async (t) => {
    const k = await startTestApp(t);
    const base = await listen(k);
    const key = newId();
    const body = { label: 'nf', outcome: 'not_found', gate: 'nf' };
    const first = post(base, k.alice, key, body);
    await k.gates.entered('nf');
    const second = post(base, k.alice, key, body);
    // The second request is past the fast path and waits at the key's primary
    // key; let it get there before the first ends.
    await waitFor(async () => {
      // pg_locks is readable by every role (pg_stat_activity hides other roles' waits).
      const [row] = await k.tdb.owner<
        { n: string }[]
      >`select count(*) as n from pg_locks where not granted`;
      return Number(row?.n) >= 1;
    });
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

async function waitFor(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('condition not reached');
}
