/**
 * A keyed request whose transaction dies while its handler runs (the
 * connection is terminated, or database.transaction_timeout fires) gets a
 * prompt 503 that is not stored; the process stays up; the handler's later
 * database calls fail cleanly; a repeat with the same key takes effect once.
 * Before the transaction's loss was handled, the process crashed here.
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

/** How long a released handler is watched for a late write. */
const WATCH_MS = 1500;

/**
 * Watches idempotency_keys, test_effects and the handler's run count until
 * the deadline, and returns at the first sign of a write or a second run.
 * The released handler's end cannot be observed (the unit of work abandons a
 * transaction whose connection died, and nothing settles), so "nothing
 * stored" is proved over a window: a late commit or a retry that ran the
 * handler again shows as soon as it happens, not only if it lands before a
 * single look.
 *
 * @param k the test application.
 * @param ms the deadline, from now.
 * @returns what was seen: empty arrays and one call when nothing happened.
 */
async function watchNothingStored(
  k: TestApp,
  ms: number,
): Promise<{ keys: unknown[]; effects: unknown[]; calls: number }> {
  const deadline = performance.now() + ms;
  for (;;) {
    const seen = {
      keys: await k.keys(),
      effects: await k.effects(),
      calls: k.calls.get('createEffect') ?? 0,
    };
    if (seen.keys.length > 0 || seen.effects.length > 0 || seen.calls !== 1) return seen;
    if (performance.now() >= deadline) return seen;
    await new Promise((r) => setTimeout(r, 25));
  }
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
    t.same(
      await watchNothingStored(k, WATCH_MS),
      { keys: [], effects: [], calls: 1 },
      `nothing stored, no effect and no second run for ${String(WATCH_MS)} ms after the release`,
    );
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
  t.same(
    await watchNothingStored(k, WATCH_MS),
    { keys: [], effects: [], calls: 1 },
    `nothing stored, no effect and no second run for ${String(WATCH_MS)} ms after the release`,
  );
  t.equal(
    k.metrics.value('idempotency_requests_total', { route: 'createEffect', outcome: 'not_stored' }),
    1,
  );
});

for (const outcome of ['sleep', 'sleep_then_query'] as const) {
  void t.test(
    `a query in flight when the connection dies (${outcome}): 503, no crash, other traffic unharmed`,
    async (t) => {
      const k = await startTestApp(t, { env: { DATABASE__POOL_MAX: '2' } });
      const key = newId();
      const pending = keyed(k, key, { label: 'victim', outcome });
      const admin = postgres(k.tdb.adminUrl, { max: 1, onnotice: () => undefined });
      // Wait until the statement runs, then terminate its backend.
      for (;;) {
        const rows =
          await admin`select 1 from pg_stat_activity where datname = current_database() and query like '%pg_sleep(30)%' and state = 'active' and pid <> pg_backend_pid()`;
        if (rows.length > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      const others = Array.from({ length: 6 }, (_, i) =>
        keyed(k, newId(), { label: `other-${String(i)}` }),
      );
      const killed =
        await admin`select pg_terminate_backend(pid) as ok from pg_stat_activity where datname = current_database() and query like '%pg_sleep(30)%' and pid <> pg_backend_pid()`;
      await admin.end();
      t.equal(killed.length, 1);
      const res = await settlesWithin(pending, 5000);
      t.not(res, 'pending', 'the victim is answered');
      if (res !== 'pending') t.equal(res.statusCode, 503);
      const rest = await settlesWithin(Promise.all(others), 10000);
      t.not(rest, 'pending', 'other requests are answered');
      if (rest !== 'pending') {
        // postgres.js 3.4.9 may fail a request that reuses the dying connection
        // (it keeps a stale write buffer): such a request gets a retryable 503,
        // never a 500, a hang or a half-done effect.
        for (const r of rest)
          t.ok(
            r.statusCode === 201 || r.statusCode === 503,
            `other request: ${String(r.statusCode)}`,
          );
        const ok = rest.filter((r) => r.statusCode === 201).length;
        const labels = (await k.effects())
          .map((e) => e.label)
          .filter((l) => l.startsWith('other-'));
        t.equal(labels.length, ok, 'one effect per 201, none for a 503');
      }
      t.notOk(
        (await k.effects()).some((e) => e.label.startsWith('victim')),
        'no effect of the victim',
      );
      const again = await keyed(k, key, { label: 'victim' });
      t.equal(again.statusCode, 201, 'a repeat with the same key runs');
      t.equal(
        again.headers['idempotent-replay'],
        'false',
        'as an original: the 503 was not stored',
      );
      const victims = async () =>
        (await k.effects()).map((e) => e.label).filter((l) => l.startsWith('victim'));
      t.same(await victims(), ['victim'], 'one effect of the victim: the repeat, once');
      const rows = (await k.keys()).filter((r) => r['key'] === key);
      t.same(
        rows.map((r) => [r['state'], r['response_status'], r['resource_id']]),
        [['completed', 201, again.json<{ id: string }>().id]],
        'one completed idempotency_keys row for the key, holding the 201',
      );
      const replay = await keyed(k, key, { label: 'victim' });
      t.equal(replay.headers['idempotent-replay'], 'true', 'a second repeat is a replay');
      t.equal(replay.body, again.body, 'of the same answer');
      t.same(await victims(), ['victim'], 'and adds no effect');
    },
  );
}
