/**
 * The cleanup job: deletes expired keys in batches (oldest first), is
 * harmless when repeated or concurrent, stops when cancelled, and its cron
 * item is registered for the worker.
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { cleanupCronPattern, CLEANUP_TASK, MAINTENANCE_QUEUE } from '../modules/sync/index.js';
import { installWorkerSchema } from '../platform/jobs/index.js';
import { startTestApp, type TestApp } from './harness/app.js';

async function seed(k: TestApp, expired: number, live: number): Promise<void> {
  const now = k.clock.now();
  const past = new Date(now.getTime() - 1000);
  const future = new Date(now.getTime() + 3600_000);
  await k.tdb.owner`
    insert into idempotency_keys (principal_id, key, action, request_sha256, state, created_at, expires_at)
    select ${k.alice.id}, gen_random_uuid(), 'seeded', '\\x00'::bytea, 'completed',
           ${past}::timestamptz - interval '1 day', ${past}::timestamptz - (n || ' seconds')::interval
      from generate_series(1, ${expired}) n`;
  await k.tdb.owner`
    insert into idempotency_keys (principal_id, key, action, request_sha256, state, created_at, expires_at)
    select ${k.alice.id}, gen_random_uuid(), 'seeded', '\\x00'::bytea, 'completed', ${now}, ${future}
      from generate_series(1, ${live})`;
}

const count = async (k: TestApp) =>
  Number((await k.tdb.owner<{ n: string }[]>`select count(*) as n from idempotency_keys`)[0]?.n);

void t.test(
  'deletes expired keys in batches until a short batch, keeps live ones; a repeat is harmless',
  async (t) => {
    const k = await startTestApp(t, { env: { SYNC__IDEMPOTENCY_CLEANUP_BATCH_SIZE: '100' } });
    await seed(k, 250, 40);
    const report = await k.app.sync.cleanup();
    t.same(report, { deleted: 250, batches: 3, aborted: false });
    t.equal(await count(k), 40, 'live keys stay');
    t.same(
      await k.app.sync.cleanup(),
      { deleted: 0, batches: 1, aborted: false },
      'a repeated run is harmless',
    );
  },
);

void t.test('concurrent runs delete each row once between them', async (t) => {
  const k = await startTestApp(t, { env: { SYNC__IDEMPOTENCY_CLEANUP_BATCH_SIZE: '50' } });
  await seed(k, 1000, 10);
  const [a, b] = await Promise.all([k.app.sync.cleanup(), k.app.sync.cleanup()]);
  t.equal(a.deleted + b.deleted, 1000);
  t.equal(await count(k), 10);
});

void t.test('stops when cancelled and reports the abort', async (t) => {
  const k = await startTestApp(t, { env: { SYNC__IDEMPOTENCY_CLEANUP_BATCH_SIZE: '10' } });
  await seed(k, 100, 0);
  const controller = new AbortController();
  controller.abort();
  t.same(await k.app.sync.cleanup(controller.signal), { deleted: 0, batches: 0, aborted: true });
  t.equal(await count(k), 100, 'nothing deleted after the abort');
});

void t.test(
  'the task runs the cleanup and counts deleted rows; the cron item is registered with a job key',
  async (t) => {
    const k = await startTestApp(t, {
      env: {
        SYNC__IDEMPOTENCY_CLEANUP_BATCH_SIZE: '100',
        SYNC__IDEMPOTENCY_CLEANUP_INTERVAL: '15m',
      },
    });
    await seed(k, 120, 0);
    const sync = k.app.modules.find((m) => m.name === 'sync');
    const task = sync?.tasks?.find((x) => x.identifier === CLEANUP_TASK);
    t.equal(task?.queue, MAINTENANCE_QUEUE);
    const logged: string[] = [];
    await task?.handler(undefined, {
      signal: new AbortController().signal,
      logger: { info: (m: string) => logged.push(m) } as never,
      job: { id: '1', attempts: 1, maxAttempts: 1 },
    });
    t.equal(await count(k), 0);
    t.equal(k.metrics.value('idempotency_cleanup_deleted_rows_total', {}), 120);
    t.match(logged.join('\n'), /120 rows deleted/);
    const cron = sync?.cron?.find((c) => c.task === CLEANUP_TASK);
    t.same(cron, {
      task: CLEANUP_TASK,
      pattern: '*/15 * * * *',
      identifier: CLEANUP_TASK,
      jobKey: CLEANUP_TASK,
      queueName: MAINTENANCE_QUEUE,
    });
    // The template holds our migrations only; graphile-worker's schema is installed by --migrate.
    await installWorkerSchema(k.tdb.ownerUrl, k.tdb.state.app.name);
    const worker = await k.app.startJobs();
    await worker.ready;
    const known = await k.tdb.owner<
      { identifier: string }[]
    >`select identifier from graphile_worker._private_known_crontabs`;
    t.same(
      known.map((r) => r.identifier),
      [CLEANUP_TASK],
      'the worker registered the cron item',
    );
  },
);

void t.test(
  'the cleanup interval becomes a cron pattern; others are refused naming the key',
  (t) => {
    t.equal(cleanupCronPattern(60_000), '* * * * *');
    t.equal(cleanupCronPattern(20 * 60_000), '*/20 * * * *');
    t.equal(cleanupCronPattern(3600_000), '0 * * * *');
    t.equal(cleanupCronPattern(6 * 3600_000), '0 */6 * * *');
    t.equal(cleanupCronPattern(24 * 3600_000), '0 */24 * * *');
    for (const bad of [7 * 60_000, 5 * 3600_000, 90_000, 48 * 3600_000]) {
      t.throws(() => cleanupCronPattern(bad), /sync\.idempotency_cleanup_interval/);
    }
    t.end();
  },
);

void t.test('a key whose row was cleaned up meanwhile is simply taken again', async (t) => {
  const k = await startTestApp(t);
  const key = newId();
  const send = () =>
    k.app.http.inject({
      method: 'POST',
      url: '/api/v1/effects',
      headers: { ...k.alice.headers, 'content-type': 'application/json', 'idempotency-key': key },
      payload: '{"label":"again"}',
    });
  t.equal((await send()).statusCode, 201);
  k.clock.advance(25 * 3600_000);
  t.equal((await k.app.sync.cleanup()).deleted, 1);
  const after = await send();
  t.equal(after.statusCode, 201);
  t.equal(
    after.headers['idempotent-replay'],
    'false',
    'expired and cleaned: the key is absent, a first answer',
  );
  t.equal((await k.effects()).length, 2);
});
