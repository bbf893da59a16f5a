/**
 * What the metrics gauges show about `idempotency_keys`.
 */

/** Statistics of `idempotency_keys`, read at scrape time. */
export interface IdempotencyKeyStats {
  /** Rows in the table: the planner's estimate (exact while the table has no statistics yet). */
  readonly rows: number;
  /** Seconds since the oldest row still present expired; 0 when no row is expired. */
  readonly oldestExpiredAgeSeconds: number;
}
