/**
 * Module sync: the idempotency store (table `idempotency_keys`) and its
 * cleanup job. The composition root binds the store to the kernel port the
 * HTTP plugin uses, and runs the cleanup task in the `worker` and `all` roles.
 */
import type { Clock } from '../../kernel/clock/index.js';
import type { IdempotencyStore } from '../../kernel/idempotency/index.js';
import type { Metrics } from '../../kernel/metrics/index.js';
import type { ModuleDescriptor } from '../../platform/module/index.js';
import type { PgDatabase } from '../../platform/pg/uow.js';
import { PgExpiredKeys } from './adapters/postgres/expired-keys.js';
import { PgIdempotencyStore } from './adapters/postgres/idempotency-store.js';
import { PgKeyStats } from './adapters/postgres/key-stats.js';
import type { CleanupReport } from './app/cleanup.js';
import type { IdempotencyKeyStats } from './app/key-stats.js';
import { cleanupJob } from './jobs/cleanup.js';

export { CLEANUP_TASK, MAINTENANCE_QUEUE } from './jobs/cleanup.js';
export { cleanupCronPattern, type CleanupReport } from './app/cleanup.js';
export type { IdempotencyKeyStats } from './app/key-stats.js';

/** What module sync needs. */
export interface SyncDeps {
  readonly db: PgDatabase;
  readonly clock: Clock;
  readonly metrics: Metrics;
  /** `sync.idempotency_cleanup_batch_size`. */
  readonly cleanupBatchSize: number;
  /** `sync.idempotency_cleanup_pacing`. */
  readonly cleanupPacing: number;
  /** `sync.idempotency_cleanup_interval`, in ms. */
  readonly cleanupIntervalMs: number;
  /**
   * `sync.idempotency_replay_cache_ttl` (ms) and `_size`: repeats of
   * completed keys answered from memory; absent, every replay reads the
   * database.
   */
  readonly replayCache?: { readonly ttlMs: number; readonly maxEntries: number };
}

/** Module sync's public face. */
export interface SyncModule {
  /** Tasks and cron items for the composition root. */
  readonly descriptor: ModuleDescriptor;
  /** The idempotency store, bound to the kernel port. */
  readonly store: IdempotencyStore;
  /**
   * Runs one cleanup pass now (what the task does, counted in the same
   * metrics), for operations and tests.
   *
   * @param signal cancels between batches.
   * @returns what was deleted.
   */
  cleanup(signal?: AbortSignal): Promise<CleanupReport>;
  /**
   * Reads the statistics of `idempotency_keys` for the metrics gauges: one
   * statement, bounded by its own statement timeout.
   *
   * @param timeoutMs the statement timeout, in ms.
   * @returns the estimated row count and the age of the oldest expired row.
   * @throws the driver's error when the read fails or times out.
   */
  keyStats(timeoutMs: number): Promise<IdempotencyKeyStats>;
}

/**
 * Builds module sync.
 *
 * @param deps database, clock, metrics and cleanup settings.
 * @returns the module.
 * @throws RangeError for a cleanup interval cron cannot express.
 */
export function createSyncModule(deps: SyncDeps): SyncModule {
  const keys = new PgExpiredKeys(deps.db);
  const stats = new PgKeyStats(deps.db);
  const job = cleanupJob({
    keys,
    clock: deps.clock,
    metrics: deps.metrics,
    batchSize: deps.cleanupBatchSize,
    pacing: deps.cleanupPacing,
    intervalMs: deps.cleanupIntervalMs,
  });
  return {
    descriptor: { name: 'sync', tasks: [job.task], cron: [job.cron] },
    store: new PgIdempotencyStore(
      deps.db,
      deps.replayCache === undefined ? {} : { replayCache: deps.replayCache },
    ),
    cleanup: job.run,
    keyStats: (timeoutMs) => stats.read(deps.clock.now(), timeoutMs),
  };
}
