/**
 * Task `sync:idempotency_cleanup` (catalogue name `sync.idempotency_cleanup`)
 * on queue `maintenance`, and its cron item.
 */
import type { Clock } from '../../../kernel/clock/index.js';
import type { Metrics } from '../../../kernel/metrics/index.js';
import {
  defineCronItem,
  defineTask,
  type CronItemDescriptor,
  type TaskDescriptor,
} from '../../../platform/jobs/index.js';
import { cleanupCronPattern, runCleanup, type ExpiredKeys } from '../app/cleanup.js';

/** The task identifier (cron identifiers cannot hold dots). */
export const CLEANUP_TASK = 'sync:idempotency_cleanup';
/** The queue maintenance work runs on. */
export const MAINTENANCE_QUEUE = 'maintenance';

/** What the cleanup task needs. */
export interface CleanupTaskDeps {
  readonly keys: ExpiredKeys;
  readonly clock: Clock;
  readonly metrics: Metrics;
  /** `sync.idempotency_cleanup_batch_size`. */
  readonly batchSize: number;
  /** `sync.idempotency_cleanup_interval`, in ms. */
  readonly intervalMs: number;
}

/**
 * The cleanup task and its cron item. The cron item has a job key, so a run
 * that is still queued or running absorbs the next tick instead of piling up.
 *
 * @param deps storage, clock, metrics and settings.
 * @returns the task descriptor and the cron item.
 * @throws RangeError for an interval cron cannot express.
 */
export function cleanupJob(deps: CleanupTaskDeps): {
  task: TaskDescriptor;
  cron: CronItemDescriptor;
} {
  const deletedRows = deps.metrics.counter(
    'idempotency_cleanup_deleted_rows_total',
    'Expired idempotency keys deleted by the cleanup job.',
    [],
  );
  const runs = deps.metrics.counter('idempotency_cleanup_runs_total', 'Cleanup runs by result.', [
    'result',
  ]);
  const task = defineTask({
    identifier: CLEANUP_TASK,
    queue: MAINTENANCE_QUEUE,
    handler: async (_payload, helpers) => {
      const report = await runCleanup({
        keys: deps.keys,
        clock: deps.clock,
        batchSize: deps.batchSize,
        signal: helpers.signal,
        onBatch: (n) => {
          deletedRows.inc({}, n);
        },
      });
      runs.inc({ result: report.aborted ? 'aborted' : 'completed' });
      helpers.logger.info(
        `idempotency cleanup ${report.aborted ? 'aborted' : 'completed'}: ${String(report.deleted)} rows deleted in ${String(report.batches)} batches`,
      );
    },
  });
  const cron = defineCronItem({
    task: CLEANUP_TASK,
    pattern: cleanupCronPattern(deps.intervalMs),
    identifier: CLEANUP_TASK,
    jobKey: CLEANUP_TASK,
    queueName: MAINTENANCE_QUEUE,
  });
  return { task, cron };
}
