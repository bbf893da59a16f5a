/**
 * A keyed request whose transaction dies while its handler runs (the
 * connection is terminated, or database.transaction_timeout fires) gets a
 * prompt 503 that is not stored; the process stays up; the handler's later
 * database calls fail cleanly; a repeat with the same key takes effect once.
 * (Found by the red-team review: before the fix the process crashed.)
 */
import t from 'tap';
import postgres from 'postgres';
import { newId } from '../kernel/ids/index.js';
import { startTestApp, type TestApp } from './harness/app.js';

function keyed(k: TestApp, key: string, body: unknown) {
  return k.app.http.inject({
    method: 'POST',
    url: '/api/v1/effects',
    headers: { 'content-type': 'application/json', ...k.alice.headers, 'idempotency-key': key },
    payload: JSON.stringify(body),
  });
}

async function settlesWithin<T>(p: Promise<T>, ms: number): Promise<T | 'pending'> {
  return Promise.race([
    p,
    new Promise<'pending'>((r) => {
      setTimeout(() => {
        r('pending');
      }, ms);
    }),
  ]);
}

void t.test(
  'the connection of a keyed request is terminated while its handler waits',
  async (t) => {
    const k = await startTestApp(t);
    const key = newId();
    const pending = keyed(k, key, { label: 'killed', gate: 'kill' });
    await k.gates.entered('kill');
    const admin = postgres(k.tdb.adminUrl, { max: 1, onnotice: () => undefined });
    const killed = await admin`
    select pg_terminate_backend(pid) as ok from pg_stat_activity
     where datname = current_database() and xact_start is not null and pid <> pg_backend_pid()
       and backend_type = 'client backend'`;
    await admin.end();
    t.equal(killed.length, 1, 'one transaction terminated');
    const res = await settlesWithin(pending, 3000);
    t.not(res, 'pending', 'the client is answered without waiting for the handler');
    if (res === 'pending') return;
    t.equal(res.statusCode, 503);
    t.equal(res.json<{ code: string }>().code, 'service_unavailable');
    t.equal(res.headers['retry-after'], '1');
    k.gates.release('kill');
    await new Promise((r) => setTimeout(r, 200));
    t.same(await k.keys(), [], 'nothing stored');
    t.same(await k.effects(), [], 'no effect');
    const again = await keyed(k, key, { label: 'killed' });
    t.equal(again.statusCode, 201, 'the repeat runs');
    t.equal((await k.effects()).length, 1, 'exactly one effect in all');
  },
);

void t.test('database.transaction_timeout ends a stuck keyed handler with a 503', async (t) => {
  const k = await startTestApp(t, { env: { DATABASE__TRANSACTION_TIMEOUT: '300ms' } });
  const key = newId();
  const pending = keyed(k, key, { label: 'stuck', gate: 'stuck' });
  await k.gates.entered('stuck');
  const res = await settlesWithin(pending, 3000);
  t.not(res, 'pending', 'answered once the transaction was killed');
  if (res === 'pending') return;
  t.equal(res.statusCode, 503);
  k.gates.release('stuck');
  await new Promise((r) => setTimeout(r, 200));
  t.same(await k.keys(), []);
  t.same(await k.effects(), []);
  t.equal(
    k.metrics.value('idempotency_requests_total', { route: 'createEffect', outcome: 'not_stored' }),
    1,
  );
});
