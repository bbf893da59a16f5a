/**
 * The Prometheus exporter end to end: what an operator scrapes from the api
 * listener and from the worker role's listener after real keyed requests,
 * cleanup runs and database reads.
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { startTestApp, type TestApp } from './harness/app.js';

const QUIET = { METRICS__PROCESS_METRICS: 'false' };

/** The value of one sample line, by metric name and exact label text (`{a="b"}` or ``). */
function sample(body: string, name: string, labels = ''): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.slice(name.length + labels.length + 1));
}

async function scrape(k: TestApp, path = '/metrics'): Promise<string> {
  const res = await k.app.http.inject({ method: 'GET', url: path });
  if (res.statusCode !== 200) throw new Error(`scrape answered ${String(res.statusCode)}`);
  return res.body;
}

function keyed(k: TestApp, key: string, label: string) {
  return k.app.http.inject({
    method: 'POST',
    url: '/api/v1/effects',
    headers: { ...k.alice.headers, 'content-type': 'application/json', 'idempotency-key': key },
    payload: JSON.stringify({ label }),
  });
}

/** Inserts expired keys for alice, the oldest `oldestSeconds` past its expiry. */
async function seedExpired(k: TestApp, count: number, oldestSeconds: number): Promise<void> {
  const now = k.clock.now();
  await k.tdb.owner`
    insert into idempotency_keys (principal_id, key, action, request_sha256, state, created_at, expires_at)
    select ${k.alice.id}, gen_random_uuid(), 'seeded', '\\x00'::bytea, 'completed',
           ${now}::timestamptz - interval '2 days',
           ${now}::timestamptz - (${oldestSeconds}::int - n + 1) * interval '1 second'
      from generate_series(1, ${count}) n`;
}

void t.test('GET /metrics shows the idempotency outcomes moving', async (t) => {
  const k = await startTestApp(t, { env: QUIET });
  const before = await scrape(k);
  t.equal(
    sample(before, 'idempotency_requests_total', '{route="createEffect",outcome="stored"}'),
    undefined,
    'no keyed request yet',
  );
  const key = newId();
  t.equal((await keyed(k, key, 'first')).statusCode, 201);
  const replay = await keyed(k, key, 'first');
  t.equal(replay.headers['idempotent-replay'], 'true');
  t.equal((await keyed(k, key, 'different')).statusCode, 422);

  const res = await k.app.http.inject({ method: 'GET', url: '/metrics' });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  const body = res.body;
  t.equal(sample(body, 'idempotency_requests_total', '{route="createEffect",outcome="stored"}'), 1);
  t.equal(
    sample(body, 'idempotency_requests_total', '{route="createEffect",outcome="replayed"}'),
    1,
  );
  t.equal(sample(body, 'idempotency_requests_total', '{route="createEffect",outcome="reused"}'), 1);
  t.match(body, '# TYPE idempotency_key_wait_seconds histogram');
  t.ok(
    (sample(body, 'idempotency_key_wait_seconds_count', '{route="createEffect"}') ?? 0) >= 1,
    'taking the key was timed',
  );
  t.equal(
    sample(body, 'idempotency_key_wait_seconds_bucket', '{le="+Inf",route="createEffect"}'),
    sample(body, 'idempotency_key_wait_seconds_count', '{route="createEffect"}'),
  );
  t.equal(sample(body, 'idempotency_local_waiters'), 0);
  t.equal(
    sample(body, 'http_requests_total', '{method="POST",route="/api/v1/effects",status="201"}'),
    2,
    'the first answer and its replay',
  );
  t.equal(
    sample(body, 'http_requests_total', '{method="GET",route="/metrics",status="200"}'),
    1,
    'the earlier scrape is counted too',
  );
  t.ok(
    (sample(
      body,
      'http_request_duration_seconds_count',
      '{method="POST",route="/api/v1/effects"}',
    ) ?? 0) >= 3,
  );
  t.equal(sample(body, 'db_pool_max_connections', '{pool="app"}'), 10);
  t.equal(
    k.metrics.value('idempotency_requests_total', { route: 'createEffect', outcome: 'stored' }),
    1,
    'the in-memory metrics a test passes in still receive every write',
  );
});

void t.test(
  'the metrics route needs no token, is rate limited by address and is not documented',
  async (t) => {
    const k = await startTestApp(t, { env: { ...QUIET, HTTP__RATE_LIMIT_MAX: '2' } });
    for (let i = 0; i < 2; i++) {
      const res = await k.app.http.inject({ method: 'GET', url: '/metrics' });
      t.equal(res.statusCode, 200, `scrape ${String(i + 1)}`);
      t.equal(res.headers['ratelimit-limit'], '2', 'counted like any anonymous call');
    }
    const over = await k.app.http.inject({ method: 'GET', url: '/metrics' });
    t.equal(over.statusCode, 429, 'a flood of scrapes is refused');
    t.match(over.json(), { code: 'rate_limited' });
    const doc = k.app.http.swagger() as unknown as { paths: Record<string, unknown> };
    t.notOk('/metrics' in doc.paths, 'hidden from the API document');
  },
);

void t.test('cleanup runs count the rows they delete', async (t) => {
  const k = await startTestApp(t, { env: QUIET });
  await seedExpired(k, 3, 60);
  t.same(await k.app.sync.cleanup(), { deleted: 3, batches: 1, aborted: false });
  await k.app.sync.cleanup();
  const body = await scrape(k);
  t.equal(sample(body, 'idempotency_cleanup_deleted_rows_total'), 3);
  t.equal(sample(body, 'idempotency_cleanup_runs_total', '{result="completed"}'), 2);
});

void t.test('the size of idempotency_keys and the age of its oldest expired row', async (t) => {
  const k = await startTestApp(t, { env: QUIET });
  let body = await scrape(k);
  t.equal(sample(body, 'idempotency_keys_rows'), 0, 'empty table');
  t.equal(sample(body, 'idempotency_keys_oldest_expired_age_seconds'), 0, 'nothing expired');

  t.equal((await keyed(k, newId(), 'live')).statusCode, 201);
  await seedExpired(k, 4, 90);
  body = await scrape(k);
  t.equal(sample(body, 'idempotency_keys_rows'), 5, 'counted while never analyzed');
  t.equal(sample(body, 'idempotency_keys_oldest_expired_age_seconds'), 90);

  k.clock.advance(10_000);
  t.equal(sample(await scrape(k), 'idempotency_keys_oldest_expired_age_seconds'), 100);

  await k.tdb.owner`analyze idempotency_keys`;
  t.equal(
    sample(await scrape(k), 'idempotency_keys_rows'),
    5,
    "from the planner's statistics once analyzed",
  );

  await k.app.sync.cleanup();
  body = await scrape(k);
  t.equal(sample(body, 'idempotency_keys_oldest_expired_age_seconds'), 0, 'expired rows gone');
});

void t.test(
  'a failing statistics read exports NaN and logs, the scrape still answers',
  async (t) => {
    const k = await startTestApp(t, { env: QUIET });
    await k.tdb.owner.unsafe(`revoke select on idempotency_keys from ${k.tdb.state.app.name}`);
    const body = await scrape(k);
    t.match(body, /^idempotency_keys_rows Nan$/m);
    t.match(body, /^idempotency_keys_oldest_expired_age_seconds Nan$/m);
    t.match(
      k.logs.find((l) => l.msg === 'metrics: reading idempotency key statistics failed'),
      { level: 40, err: { message: /permission denied/ } },
      'logged as a warning with the cause',
    );
  },
);

void t.test('process metrics are exported by default', async (t) => {
  const k = await startTestApp(t);
  t.match(await scrape(k), '# TYPE process_cpu_user_seconds_total counter');
});

void t.test('metrics.path moves the route', async (t) => {
  const k = await startTestApp(t, { env: { ...QUIET, METRICS__PATH: '/ops/metrics' } });
  t.match(await scrape(k, '/ops/metrics'), '# TYPE idempotency_requests_total counter');
  t.equal((await k.app.http.inject({ method: 'GET', url: '/metrics' })).statusCode, 404);
});

void t.test('metrics.enabled false serves no metrics anywhere', async (t) => {
  const k = await startTestApp(t, { env: { METRICS__ENABLED: 'false' } });
  const res = await k.app.http.inject({ method: 'GET', url: '/metrics' });
  t.equal(res.statusCode, 404);
  t.equal(k.app.prometheus, undefined);
  t.equal(await k.app.serveMetricsListener(), undefined, 'no worker listener either');
  t.equal((await keyed(k, newId(), 'still counted')).statusCode, 201);
  t.equal(
    k.metrics.value('idempotency_requests_total', { route: 'createEffect', outcome: 'stored' }),
    1,
    'the metrics port still works',
  );
});

void t.test('the worker role serves the same registry on a listener of its own', async (t) => {
  const k = await startTestApp(t, { env: { ...QUIET, METRICS__PORT: '0' } });
  t.equal((await keyed(k, newId(), 'seen by the worker scrape')).statusCode, 201);
  const listener = await k.app.serveMetricsListener();
  if (listener === undefined) throw new Error('expected a metrics listener');
  t.equal(await k.app.serveMetricsListener(), listener, 'started once');
  t.match(listener.address, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.match(
    k.logs.find((l) => l.msg === 'metrics listening'),
    { level: 30, address: listener.address, path: '/metrics' },
    'the bound address is logged',
  );
  const res = await fetch(`${listener.address}/metrics`);
  t.equal(res.status, 200);
  t.equal(res.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
  const body = await res.text();
  t.equal(sample(body, 'idempotency_requests_total', '{route="createEffect",outcome="stored"}'), 1);
  t.equal(sample(body, 'idempotency_keys_rows'), 1);
  t.equal((await fetch(`${listener.address}/other`)).status, 404);
  await k.app.close();
  await t.rejects(fetch(`${listener.address}/metrics`), 'closed with the app');
});

void t.test('metrics.listener own keeps metrics off the API listener', async (t) => {
  const k = await startTestApp(t, {
    env: { ...QUIET, METRICS__LISTENER: 'own', METRICS__PORT: '0' },
  });
  const onApi = await k.app.http.inject({ method: 'GET', url: '/metrics' });
  t.equal(onApi.statusCode, 404, 'not on the API listener');
  const listener = await k.app.serveMetricsListener();
  if (listener === undefined) throw new Error('expected a metrics listener');
  const res = await fetch(`${listener.address}/metrics`);
  t.equal(res.status, 200, 'on a listener of its own');
  t.match(await res.text(), /\nhttp_requests_total\{/);
});

void t.test(
  'scrapes within metrics.key_stats_min_interval reuse the last key statistics',
  async (t) => {
    const k = await startTestApp(t, { env: { METRICS__KEY_STATS_MIN_INTERVAL: '1h' } });
    t.equal(sample(await scrape(k), 'idempotency_keys_rows'), 0);
    t.equal((await keyed(k, newId(), 'cached')).statusCode, 201);
    for (let i = 0; i < 20; i++) {
      t.equal(sample(await scrape(k), 'idempotency_keys_rows'), 0, 'the cached value, no new read');
    }
  },
);
