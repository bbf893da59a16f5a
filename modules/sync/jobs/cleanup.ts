/**
 * Task `sync:idempotency_cleanup` (catalogue name `sync.idempotency_cleanup`)
 * on queue `maintenance`, and its cron item.
 */
import { SpanStatusCode, trace } from '@opentelemetry/api';
import type { Clock } from '../../../kernel/clock/index.js';
import { errorType } from '../../../kernel/errs/index.js';
import type { Metrics } from '../../../kernel/metrics/index.js';
import {
  defineCronItem,
  defineTask,
  type CronItemDescriptor,
  type TaskDescriptor,
} from '../../../platform/jobs/index.js';
import {
  cleanupCronPattern,
  runCleanup,
  type CleanupReport,
  type ExpiredKeys,
} from '../app/cleanup.js';

/** The tracer of the cleanup runs' spans. */
export const CLEANUP_TRACER = 'sync';
/** The span of one cleanup run (docs/operations/tracing.md). */
export const CLEANUP_SPAN = 'idempotency.cleanup';

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
  /** `sync.idempotency_cleanup_pacing`. */
  readonly pacing: number;
  /** `sync.idempotency_cleanup_interval`, in ms. */
  readonly intervalMs: number;
}

/**
 * The cleanup task and its cron item. The cron item has a job key, so a run
 * that is still queued or running absorbs the next tick instead of piling up.
 *
 * @param deps storage, clock, metrics and settings.
 * @returns the task descriptor, the cron item, and `run`: one counted cleanup
 *   pass (what the task does, without its log line).
 * @throws RangeError for an interval cron cannot express.
 */
export function cleanupJob(deps: CleanupTaskDeps): {
  task: TaskDescriptor;
  cron: CronItemDescriptor;
  run: (signal?: AbortSignal) => Promise<CleanupReport>;
} {
  const deletedRows = deps.metrics.counter(
    'idempotency_cleanup_deleted_rows_total',
    'Expired idempotency keys deleted by the cleanup job.',
    [],
  );
  const runs = deps.metrics.counter('idempotency_cleanup_runs_total', 'Cleanup runs by result.', [
    'result',
  ]);
  // The task and a run started by hand (operations, tests) count alike,
  // and each is a span (a no-op unless tracing is on) whose children are
  // its DELETE statements.
  const run = (signal?: AbortSignal): Promise<CleanupReport> =>
    trace.getTracer(CLEANUP_TRACER).startActiveSpan(CLEANUP_SPAN, async (span) => {
      try {
        const report = await runCleanup({
          keys: deps.keys,
          clock: deps.clock,
          batchSize: deps.batchSize,
          pacing: deps.pacing,
          ...(signal === undefined ? {} : { signal }),
          onBatch: (n) => {
            deletedRows.inc({}, n);
          },
        });
        runs.inc({ result: report.aborted ? 'aborted' : 'completed' });
        span.setAttributes({
          'idempotency.cleanup.deleted_rows': report.deleted,
          'idempotency.cleanup.batches': report.batches,
          'idempotency.cleanup.aborted': report.aborted,
        });
        return report;
      } catch (err) {
        const type = errorType(err);
        span.setAttribute('error.type', type);
        span.setStatus({ code: SpanStatusCode.ERROR, message: type });
        throw err;
      } finally {
        try {
          span.end();
        } catch {
          // A span processor's failure is not the run's: its rows are deleted and counted.
        }
      }
    });
  const task = defineTask({
    identifier: CLEANUP_TASK,
    queue: MAINTENANCE_QUEUE,
    handler: async (_payload, helpers) => {
      const report = await run(helpers.signal);
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
  return { task, cron, run };
}
