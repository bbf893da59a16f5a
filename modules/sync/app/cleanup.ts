/**
 * The cleanup use case of `sync:idempotency_cleanup`: deletes expired keys in
 * batches until a batch comes back short or the job is cancelled.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../../../kernel/clock/index.js';

/** The storage side of cleanup. */
export interface ExpiredKeys {
  /**
   * Deletes up to `limit` keys with `expires_at <= now`, oldest first.
   *
   * @param now the kernel clock's time.
   * @param limit the batch size.
   * @returns how many rows were deleted.
   */
  deleteBatch(now: Date, limit: number): Promise<number>;
}

/** What a cleanup run did. */
export interface CleanupReport {
  /** Rows deleted in all. */
  readonly deleted: number;
  /** Batches run. */
  readonly batches: number;
  /** True when the run stopped because it was cancelled. */
  readonly aborted: boolean;
}

/** Monotonic time and sleeping, for pacing (injected by tests). */
export interface CleanupTimer {
  /** Milliseconds on a monotonic clock. */
  now(): number;
  /**
   * Waits, or rejects when the signal is aborted.
   *
   * @param ms how long.
   * @param signal the run's cancellation.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The longest pause between two batches, in ms. */
export const MAX_CLEANUP_PAUSE_MS = 1_000;

const realTimer: CleanupTimer = {
  now: () => performance.now(),
  sleep: (ms, signal) => sleep(ms, undefined, signal === undefined ? {} : { signal }),
};

/** Dependencies and settings of {@link runCleanup}. */
export interface CleanupDeps {
  readonly keys: ExpiredKeys;
  readonly clock: Clock;
  /** `sync.idempotency_cleanup_batch_size`. */
  readonly batchSize: number;
  /** Cancels the run between batches (worker shutdown). */
  readonly signal?: AbortSignal;
  /** Called after each batch, e.g. to count deleted rows. */
  readonly onBatch?: (deleted: number) => void;
  /**
   * `sync.idempotency_cleanup_pacing`: after a batch slower than the fastest
   * of the run, pause this many times the difference (0: never pause).
   */
  readonly pacing: number;
  /** The monotonic clock and sleep; real ones by default. */
  readonly timer?: CleanupTimer;
}

function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}

/**
 * Deletes expired keys. "Now" is read once, so a run has a fixed horizon and
 * ends even while new keys keep expiring. A repeated or concurrent run is
 * harmless: batches skip rows another run has locked.
 *
 * Pacing: a batch takes longer than the fastest batch of the run when other
 * work (requests) competes for the database. After such a batch the run
 * pauses for `pacing` times the difference (at most
 * {@link MAX_CLEANUP_PAUSE_MS}), so it yields to traffic in proportion to how
 * much traffic slows it, and runs at full speed when it is alone.
 *
 * @param deps storage, clock, batch size, pacing and cancellation.
 * @returns rows deleted, batches run, and whether the run was cancelled.
 */
export async function runCleanup(deps: CleanupDeps): Promise<CleanupReport> {
  const timer = deps.timer ?? realTimer;
  const now = deps.clock.now();
  let deleted = 0;
  let batches = 0;
  let fastest = Infinity;
  for (;;) {
    if (isAborted(deps.signal)) return { deleted, batches, aborted: true };
    const started = timer.now();
    const n = await deps.keys.deleteBatch(now, deps.batchSize);
    const took = timer.now() - started;
    batches++;
    deleted += n;
    deps.onBatch?.(n);
    if (n < deps.batchSize) return { deleted, batches, aborted: false };
    fastest = Math.min(fastest, took);
    const pause = Math.min(MAX_CLEANUP_PAUSE_MS, deps.pacing * (took - fastest));
    if (pause > 0) {
      try {
        await timer.sleep(pause, deps.signal);
      } catch (err) {
        if (isAborted(deps.signal)) return { deleted, batches, aborted: true };
        throw err;
      }
    }
  }
}

/**
 * The cron pattern for a cleanup interval: whole minutes that divide 60
 * (`*\/15 * * * *`) or whole hours that divide 24 (`0 *\/6 * * *`).
 *
 * @param intervalMs `sync.idempotency_cleanup_interval` in ms.
 * @returns a five-field cron pattern (UTC).
 * @throws RangeError naming the key for any other interval (the configuration
 *   schema refuses those first).
 */
export function cleanupCronPattern(intervalMs: number): string {
  const minute = 60_000;
  const hour = 60 * minute;
  if (intervalMs % hour === 0 && 24 % (intervalMs / hour) === 0) {
    const hours = intervalMs / hour;
    return hours === 1 ? '0 * * * *' : `0 */${String(hours)} * * *`;
  }
  if (intervalMs % minute === 0 && intervalMs < hour && 60 % (intervalMs / minute) === 0) {
    const minutes = intervalMs / minute;
    return minutes === 1 ? '* * * * *' : `*/${String(minutes)} * * * *`;
  }
  throw new RangeError(
    `sync.idempotency_cleanup_interval must be whole minutes that divide 60 or whole hours that divide 24, got ${String(intervalMs)} ms`,
  );
}
