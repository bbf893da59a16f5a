import { setTimeout as delay } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import { TransactionRequiredError } from '../../kernel/txn/index.js';
import { testDatabase } from '../../test/harness/db.js';
import { createLogger } from '../log/index.js';
import { PgDatabase, PgUnitOfWork } from '../pg/uow.js';
import { addJob } from './add-job.js';
import { installWorkerSchema } from './schema.js';
import { defineCronItem, defineTask, type JobHelpers, type TaskDescriptor } from './task.js';
import { startWorker, type WorkerHandle, type WorkerOptions } from './worker.js';

const SAFETY_NET_MS = 30_000;
const logger = createLogger({ appName: 'jobs-test', level: 'silent' });

/** Resolves with `promise`, or fails the wait after the safety net: never a timed assertion. */
async function within<T>(promise: Promise<T>, what: string): Promise<T> {
  const ac = new AbortController();
  try {
    return await Promise.race([
      promise,
      delay(SAFETY_NET_MS, undefined, { signal: ac.signal }).then(() => {
        throw new Error(`gave up waiting for ${what}`);
      }),
    ]);
  } finally {
    ac.abort();
  }
}

/** A task that records its payloads and lets a test wait for the n-th call. */
function recorder(identifier = 'test:record', queue = 'test') {
  const calls: unknown[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const task = defineTask({
    identifier,
    queue,
    handler: (payload) => {
      calls.push(payload);
      for (const w of waiters.filter((w) => calls.length >= w.n)) w.resolve();
      return Promise.resolve();
    },
  });
  const called = (n: number): Promise<void> =>
    within(
      new Promise<void>((resolve) => {
        if (calls.length >= n) resolve();
        else waiters.push({ n, resolve });
      }),
      `${identifier} to run ${n} time(s)`,
    );
  return { task, calls, called };
}

async function setup(t: Test) {
  const tdb = await testDatabase(t);
  await installWorkerSchema(tdb.ownerUrl, tdb.state.app.name);
  const db = new PgDatabase(tdb.app);
  const uow = new PgUnitOfWork(db, {
    lockTimeoutMs: 5000,
    statementTimeoutMs: 30000,
    transactionTimeoutMs: 60000,
    retryMax: 0,
  });
  const jobs = () =>
    tdb.owner<
      {
        id: string;
        task_identifier: string;
        queue_name: string | null;
        attempts: number;
        last_error: string | null;
        locked_at: Date | null;
        key: string | null;
        max_attempts: number;
        run_at: Date;
      }[]
    >`
      select id::text, task_identifier, queue_name, attempts, last_error, locked_at, key, max_attempts, run_at
      from graphile_worker.jobs order by id`;
  const start = async (
    tasks: TaskDescriptor[],
    extra: Partial<WorkerOptions> = {},
  ): Promise<WorkerHandle> => {
    const handle = await startWorker({
      connectionString: tdb.appUrl,
      tasks,
      cron: [],
      concurrency: 1,
      logger,
      pollInterval: 1000,
      ...extra,
    });
    t.teardown(() => handle.stop());
    await within(handle.ready, 'the worker to be ready');
    return handle;
  };
  return { tdb, db, uow, jobs, start };
}

void t.test('a job added in a unit of work that rolls back is never run', async (t) => {
  const { uow, db, jobs, start } = await setup(t);
  const rec = recorder();
  await t.rejects(
    uow.run(async () => {
      await addJob(db, rec.task, { n: 'rolled back' });
      throw new Error('use case failed');
    }),
    /use case failed/,
  );
  t.same(await jobs(), [], 'no job row survived the rollback');
  await uow.run(() => addJob(db, rec.task, { n: 'sentinel' }));
  const worker = await start([rec.task]);
  await rec.called(1);
  await worker.stop();
  t.same(rec.calls, [{ n: 'sentinel' }], 'only the committed job ran');
  t.same(await jobs(), []);
});

void t.test('a committed job is run exactly once, by the application role', async (t) => {
  const { uow, db, jobs, start } = await setup(t);
  const rec = recorder();
  const metrics = new InMemoryMetrics();
  const id = await uow.run(() => addJob(db, rec.task, { n: 1 }));
  const [queued] = await jobs();
  t.equal(queued?.id, id, 'addJob returns the job id');
  t.equal(queued?.queue_name, 'test', "the task's queue");
  t.equal(queued?.task_identifier, 'test:record');

  const first = await start([rec.task], { metrics });
  await rec.called(1);
  await first.stop();
  t.same(await jobs(), [], 'the completion was recorded before stop() resolved');
  t.equal(metrics.value('jobs_total', { task: 'test:record', outcome: 'success' }), 1);
  t.equal(metrics.observations('job_duration_seconds', { task: 'test:record' }).length, 1);

  const second = await start([rec.task]);
  await uow.run(() => addJob(db, rec.task, { n: 'sentinel' }));
  await rec.called(2);
  await second.stop();
  t.same(rec.calls, [{ n: 1 }, { n: 'sentinel' }], 'the first job did not run again');
});

void t.test('addJob refuses to run outside a unit of work, and checks its arguments', async (t) => {
  const { uow, db, jobs } = await setup(t);
  const rec = recorder();
  await t.rejects(addJob(db, rec.task, {}), TransactionRequiredError);
  await t.rejects(addJob(db, 'test:record', {}), TransactionRequiredError);
  await uow.run(async () => {
    await t.rejects(addJob(db, 'test.record', {}), TypeError);
    await t.rejects(addJob(db, rec.task, { n: 1n }), TypeError, 'a payload that is not JSON');
    await t.rejects(
      addJob(db, rec.task, () => 1),
      TypeError,
      'nor a function',
    );
    await t.rejects(addJob(db, rec.task, {}, { maxAttempts: 0 }), RangeError);
    await t.rejects(addJob(db, rec.task, {}, { maxAttempts: 1.5 }), RangeError);
    await t.rejects(addJob(db, rec.task, {}, { runAt: new Date(Number.NaN) }), TypeError);
    await t.rejects(addJob(db, rec.task, {}, { jobKey: '' }), TypeError);
    await t.rejects(addJob(db, rec.task, {}, { queueName: 'other' }), /runs in queue "test"/);
    await t.rejects(addJob(db, 'test:record', {}, { queueName: 'Bad Queue' }), TypeError);
  });
  t.same(await jobs(), [], 'nothing was added');
});

void t.test('addJob passes queue, run time, job key and attempts to graphile-worker', async (t) => {
  const { uow, db, jobs } = await setup(t);
  const runAt = new Date('2100-01-01T00:00:00.000Z');
  await uow.run(async () => {
    await addJob(
      db,
      'other:task',
      { v: 1 },
      { queueName: 'elsewhere', runAt, jobKey: 'k1', maxAttempts: 3 },
    );
    // Same key: replaces the waiting job rather than adding a second one.
    await addJob(
      db,
      'other:task',
      { v: 2 },
      { queueName: 'elsewhere', runAt, jobKey: 'k1', maxAttempts: 3 },
    );
    await addJob(db, 'other:task', undefined);
  });
  const rows = await jobs();
  t.equal(rows.length, 2);
  t.match(rows[0], {
    task_identifier: 'other:task',
    queue_name: 'elsewhere',
    key: 'k1',
    max_attempts: 3,
    attempts: 0,
  });
  t.equal(rows[0]?.run_at.toISOString(), runAt.toISOString());
  t.match(
    rows[1],
    { queue_name: null, key: null, max_attempts: 25 },
    'a bare identifier joins no queue',
  );
  const payloads = await db.sql()<
    { payload: unknown }[]
  >`select payload from graphile_worker._private_jobs order by id`;
  t.same(
    payloads.map((p) => p.payload),
    [{ v: 2 }, {}],
    'the replaced payload, and {} for none',
  );
});

void t.test(
  'cron items are registered when the worker starts (no backfill, so no run now)',
  async (t) => {
    const { tdb, start } = await setup(t);
    const rec = recorder('sync:idempotency_cleanup', 'maintenance');
    const cron = defineCronItem({
      task: 'sync:idempotency_cleanup',
      pattern: '0 3 * * *',
      identifier: 'sync:idempotency_cleanup',
      jobKey: 'sync:idempotency_cleanup',
      queueName: 'maintenance',
    });
    const worker = await start([rec.task], { cron: [cron] });
    const known = await tdb.owner<
      { identifier: string; known: boolean; last_execution: Date | null }[]
    >`
    select identifier, known_since is not null as known, last_execution from graphile_worker._private_known_crontabs`;
    t.same(known, [{ identifier: 'sync:idempotency_cleanup', known: true, last_execution: null }]);
    await worker.stop();
    t.same(rec.calls, [], 'registration scheduled nothing');
  },
);

void t.test('a job in flight when stop() is called finishes and is not run again', async (t) => {
  const { uow, db, jobs, start } = await setup(t);
  let runs = 0;
  let started!: () => void;
  const isStarted = new Promise<void>((resolve) => (started = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const slow = defineTask({
    identifier: 'test:slow',
    queue: 'test',
    handler: async () => {
      runs++;
      started();
      await released;
    },
  });
  const rec = recorder();
  await uow.run(() => addJob(db, slow, {}));
  const first = await start([slow, rec.task]);
  await within(isStarted, 'the slow job to start');
  const stopping = first.stop();
  release();
  await within(stopping, 'the worker to stop');
  t.equal(runs, 1);
  t.same(await jobs(), [], 'its row is gone: the completion was not lost');

  const second = await start([slow, rec.task]);
  await uow.run(() => addJob(db, rec.task, { n: 'sentinel' }));
  await rec.called(1);
  await second.stop();
  t.equal(runs, 1, 'a new worker did not run it again');
});

void t.test('a failing job is recorded as failed and left to retry', async (t) => {
  const { uow, db, jobs, start } = await setup(t);
  const metrics = new InMemoryMetrics();
  let failed!: () => void;
  const hasFailed = new Promise<void>((resolve) => (failed = resolve));
  const seen: JobHelpers['job'][] = [];
  const failing = defineTask({
    identifier: 'test:failing',
    queue: 'test',
    handler: (_payload, { job }) => {
      seen.push(job);
      failed();
      return Promise.reject(new Error('boom'));
    },
  });
  const id = await uow.run(() => addJob(db, failing, {}, { maxAttempts: 5 }));
  const worker = await start([failing], { metrics });
  await within(hasFailed, 'the job to fail');
  await worker.stop();
  t.same(seen, [{ id, attempts: 1, maxAttempts: 5 }], 'the handler saw its job');
  const [row] = await jobs();
  t.match(row, { id, attempts: 1, last_error: 'boom', locked_at: null });
  t.ok((row?.run_at.getTime() ?? 0) > Date.now(), 'the retry is scheduled later');
  t.equal(metrics.value('jobs_total', { task: 'test:failing', outcome: 'failure' }), 1);
});

void t.test(
  'a handler waiting on the signal is aborted by stop() after the grace period',
  async (t) => {
    const { uow, db, jobs, start } = await setup(t);
    let started!: () => void;
    const isStarted = new Promise<void>((resolve) => (started = resolve));
    const patient = defineTask({
      identifier: 'test:patient',
      queue: 'test',
      handler: async (_payload, { signal }) => {
        started();
        await new Promise<void>((_resolve, reject) => {
          signal.addEventListener('abort', () => {
            reject(new Error('cancelled by shutdown'));
          });
        });
      },
    });
    await uow.run(() => addJob(db, patient, {}));
    const worker = await start([patient], { shutdownAbortAfterMs: 0 });
    await within(isStarted, 'the job to start');
    await within(worker.stop(), 'stop to abort the job');
    const [row] = await jobs();
    t.match(
      row,
      { attempts: 1, last_error: 'cancelled by shutdown', locked_at: null },
      'failed, so it will be retried',
    );
  },
);

void t.test('stop() is idempotent and settles done', async (t) => {
  const { start } = await setup(t);
  const rec = recorder();
  const worker = await start([rec.task]);
  const a = worker.stop();
  const b = worker.stop();
  t.equal(a, b, 'the same promise');
  await a;
  await within(worker.done, 'done to settle');
  t.pass('stopped');
});

void t.test(
  'the worker refuses to start before installWorkerSchema, or with a bad registry',
  async (t) => {
    const tdb = await testDatabase(t);
    const rec = recorder();
    const options: WorkerOptions = {
      connectionString: tdb.appUrl,
      tasks: [rec.task],
      cron: [],
      concurrency: 1,
      logger,
      pollInterval: 1000,
    };
    await t.rejects(
      startWorker(options),
      /does not exist: the owner role must run installWorkerSchema/,
    );
    await installWorkerSchema(tdb.ownerUrl, tdb.state.app.name);
    await tdb.owner.unsafe(`revoke usage on schema graphile_worker from ${tdb.state.app.name}`);
    await t.rejects(
      startWorker(options),
      /may not use schema graphile_worker: run installWorkerSchema/,
    );
    await t.rejects(startWorker({ ...options, tasks: [] }), /at least one task/);
    await t.rejects(startWorker({ ...options, concurrency: 0 }), RangeError);
    await t.rejects(startWorker({ ...options, pollInterval: -1 }), RangeError);
  },
);
