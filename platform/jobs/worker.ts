/**
 * The worker: runs the tasks and cron items modules register, on
 * graphile-worker, as the application role, and stops without losing the
 * completion of a job that was running.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { run, type Runner, type Task, type TaskList, type WorkerEvents } from 'graphile-worker';
import type pg from 'pg';
import type { Counter, Histogram, Metrics } from '../../kernel/metrics/index.js';
import type { Logger } from '../log/index.js';
import { createWorkerPool, graphileLogger } from './connection.js';
import { WORKER_SCHEMA } from './schema.js';
import { toParsedCronItems, type CronItemDescriptor, type TaskDescriptor } from './task.js';

/** Options of {@link startWorker}. */
export interface WorkerOptions {
  /** URL as the application role; the schema must have been installed for it by {@link installWorkerSchema}. */
  readonly connectionString: string;
  /** Every task this worker runs; jobs of other tasks are left for other workers. */
  readonly tasks: readonly TaskDescriptor[];
  /** Recurring jobs; each names one of `tasks` and its queue. */
  readonly cron: readonly CronItemDescriptor[];
  /** Jobs run at the same time by this process (an integer from 1). */
  readonly concurrency: number;
  /** The process logger; graphile-worker's messages and each job's logger derive from it. */
  readonly logger: Logger;
  /**
   * Milliseconds between checks for jobs that became due (scheduled, or
   * retried); new jobs are noticed at once through LISTEN/NOTIFY.
   */
  readonly pollInterval: number;
  /** Where `jobs_total` and `job_duration_seconds` are recorded; none when absent. */
  readonly metrics?: Metrics;
  /**
   * Milliseconds after `stop()` before handlers' `signal` is aborted
   * (default 5000): the grace period for jobs to finish on their own.
   */
  readonly shutdownAbortAfterMs?: number;
  /** Connections of the worker's pool (default concurrency + 2: one listens, one serves cron). */
  readonly maxPoolSize?: number;
  /** Shown in pg_stat_activity (default `worker`). */
  readonly applicationName?: string;
}

/** A running worker. */
export interface WorkerHandle {
  /**
   * Resolves once the cron items are registered and the worker listens for
   * new jobs; rejects when the worker stops first.
   */
  readonly ready: Promise<void>;
  /** Settles when the worker has stopped: rejects when it stopped because of an error. */
  readonly done: Promise<void>;
  /**
   * Stops taking jobs, waits for the running ones to finish (their
   * handlers' signal is aborted after the grace period), records their
   * outcome, and closes the pool. Calling it again returns the same promise.
   */
  stop(): Promise<void>;
}

/** Metric names the worker writes. */
export const JOB_METRICS = Object.freeze({
  runs: 'jobs_total',
  duration: 'job_duration_seconds',
});

interface Instruments {
  readonly runs: Counter;
  readonly duration: Histogram;
}

/**
 * Starts a worker.
 *
 * graphile-worker is configured so that a shutdown cannot lose a completion:
 * `completeJobBatchDelay` and `failJobBatchDelay` are 0, which makes it
 * record outcomes through batchers that stop() drains; with its default (no
 * batching) the completion is written without being awaited, the pool closes
 * under it, and the job, still locked, runs again hours later. It installs no
 * signal handlers (the composition root owns SIGTERM), reads no crontab file
 * and no task directory, and uses the schema {@link WORKER_SCHEMA} whatever
 * the environment says.
 *
 * @param options connection, tasks, cron items, concurrency, logger, polling.
 * @returns the running worker.
 * @throws TypeError on a bad task or cron item registry (see {@link toParsedCronItems}).
 * @throws RangeError on a bad concurrency, poll interval, grace period or pool size.
 * @throws Error when the schema is missing or the role may not use it, or the
 *   database cannot be reached.
 */
export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const { concurrency, pollInterval } = options;
  assertRange('concurrency', concurrency, Number.isInteger(concurrency) && concurrency >= 1);
  assertRange('pollInterval', pollInterval, Number.isFinite(pollInterval) && pollInterval > 0);
  const abortAfter = options.shutdownAbortAfterMs ?? 5000;
  assertRange('shutdownAbortAfterMs', abortAfter, Number.isFinite(abortAfter) && abortAfter >= 0);
  const maxPoolSize = options.maxPoolSize ?? concurrency + 2;
  assertRange('maxPoolSize', maxPoolSize, Number.isInteger(maxPoolSize) && maxPoolSize >= 2);
  const parsedCronItems = toParsedCronItems(options.tasks, options.cron);
  const instruments = options.metrics && {
    runs: options.metrics.counter(
      JOB_METRICS.runs,
      'Jobs run by this worker, by task and outcome.',
      ['task', 'outcome'],
    ),
    duration: options.metrics.histogram(JOB_METRICS.duration, 'Time a job handler took, by task.', [
      'task',
    ]),
  };
  const taskList: TaskList = {};
  for (const task of options.tasks) {
    taskList[task.identifier] = wrap(task, options.logger, instruments);
  }

  const pool = createWorkerPool(options.connectionString, {
    max: maxPoolSize,
    applicationName: options.applicationName ?? 'worker',
    logger: options.logger,
  });
  // Our own emitter, so listeners exist before graphile-worker emits anything.
  const events = new EventEmitter() as WorkerEvents;
  let runnerStopping = false;
  events.once('stop', () => {
    runnerStopping = true;
  });
  const cronStarted = new Promise<void>((resolve) => {
    events.once('cron:started', () => {
      resolve();
    });
  });
  const listening = new Promise<void>((resolve) => {
    events.once('pool:listen:success', () => {
      resolve();
    });
  });
  let runner: Runner;
  try {
    await assertSchemaUsable(pool);
    runner = await run({
      pgPool: pool,
      schema: WORKER_SCHEMA,
      taskList,
      parsedCronItems,
      concurrency,
      pollInterval,
      logger: graphileLogger(options.logger),
      events,
      noHandleSignals: true,
      gracefulShutdownAbortTimeout: abortAfter,
      preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    });
  } catch (err) {
    await pool.end();
    throw err;
  }

  const done = runner.promise;
  const ready = Promise.race([
    Promise.all([cronStarted, listening]).then(() => undefined),
    done.then(() => {
      throw new Error('the worker stopped before it was ready');
    }),
  ]);
  // Observed here so a caller that ignores them gets no unhandled rejection;
  // a caller that awaits them still sees the error.
  done.catch(() => undefined);
  ready.catch(() => undefined);

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      try {
        // A runner that stopped itself (its pool failed) refuses stop();
        // its error is already in `done`.
        if (!runnerStopping) await runner.stop();
        await done.catch(() => undefined);
      } finally {
        await pool.end();
      }
    })());
  return { ready, done, stop };
}

function wrap(task: TaskDescriptor, logger: Logger, instruments: Instruments | undefined): Task {
  return async (payload, helpers) => {
    const { job } = helpers;
    const started = performance.now();
    let outcome = 'failure';
    try {
      await task.handler(payload, {
        signal: helpers.abortSignal,
        logger: logger.child({ task: task.identifier, job_id: job.id }),
        job: { id: job.id, attempts: job.attempts, maxAttempts: job.max_attempts },
      });
      outcome = 'success';
    } finally {
      instruments?.runs.inc({ task: task.identifier, outcome });
      instruments?.duration.observe(
        { task: task.identifier },
        (performance.now() - started) / 1000,
      );
    }
  };
}

async function assertSchemaUsable(pool: pg.Pool): Promise<void> {
  const { rows } = await pool.query<{ usable: boolean }>(
    `select has_schema_privilege(oid, 'USAGE') as usable from pg_namespace where nspname = $1`,
    [WORKER_SCHEMA],
  );
  const row = rows[0];
  if (!row) {
    throw new Error(
      `schema ${WORKER_SCHEMA} does not exist: the owner role must run installWorkerSchema (migrate) before the worker starts`,
    );
  }
  if (!row.usable) {
    throw new Error(
      `the worker's role may not use schema ${WORKER_SCHEMA}: run installWorkerSchema(ownerUrl, appRole) for this role`,
    );
  }
}

function assertRange(name: string, value: number, ok: boolean): void {
  if (!ok) throw new RangeError(`startWorker: ${name} ${String(value)} is out of range`);
}
