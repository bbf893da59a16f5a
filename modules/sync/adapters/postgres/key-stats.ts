/**
 * Statistics of `idempotency_keys` for the metrics gauges: one cheap,
 * time-boxed query per scrape.
 */
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import type { IdempotencyKeyStats } from '../../app/key-stats.js';

/**
 * Reads {@link IdempotencyKeyStats} in one statement on the pool, bounded by
 * a `statement_timeout` of its own (lock waits included), so a slow
 * catalogue or a locked table cannot hold a scrape. The setting and the
 * read travel as one simple query, which PostgreSQL runs as one implicit
 * transaction: the local setting ends with it, and a failure rolls it back.
 * Not postgres.js's `begin`: after a lost connection it sends its ROLLBACK
 * on the closed connection, and the driver's write then throws out of a
 * timer (docs/DECISIONS.md, "A statement the driver kept across a reset").
 *
 * The row count is the planner's own estimate: `pg_class.reltuples` (kept by
 * autovacuum's ANALYZE) scaled by how much the table grew since, page for
 * page (`pg_relation_size`), which costs two catalogue reads whatever the
 * table's size. Only while the table has no statistics yet (never analyzed,
 * or analyzed while empty) is it an exact `count(*)`; autovacuum analyzes a
 * table after its first 50 or so rows, so that is a small table. The oldest
 * expired row is one step down the `expires_at` index.
 */
export class PgKeyStats {
  /** @param db the database handle; the read runs on the pool. */
  constructor(private readonly db: PgDatabase) {}

  /**
   * Reads the statistics.
   *
   * @param now the kernel clock's time: what "expired" is measured against.
   * @param timeoutMs the statement timeout, in ms (at least 1).
   * @returns the estimate and the age.
   * @throws the driver's error when the query fails or times out.
   */
  async read(now: Date, timeoutMs: number): Promise<IdempotencyKeyStats> {
    const sql = this.db.poolOutsideTransaction('reading idempotency key statistics');
    // A simple query takes no parameters: both values are written in, each
    // of a shape that cannot hold a quote (a whole number, an ISO instant).
    const ms = String(Math.max(1, Math.ceil(timeoutMs)));
    const at = now.toISOString();
    const results = (await sql.unsafe(`
      select set_config('statement_timeout', '${ms}ms', true);
      select case
               when c.reltuples < 0 or c.relpages = 0
                 then (select count(*) from idempotency_keys)::float8
               else round(c.reltuples / c.relpages
                          * (pg_relation_size(c.oid) / current_setting('block_size')::float8))
             end as rows,
             coalesce(extract(epoch from '${at}'::timestamptz - (
               select min(expires_at) from idempotency_keys where expires_at <= '${at}'::timestamptz)), 0)::float8 as oldest
        from pg_class c
       where c.oid = 'idempotency_keys'::regclass`)) as unknown as [
      unknown,
      { rows: number; oldest: number }[],
    ];
    const [row] = results[1];
    return { rows: row?.rows ?? 0, oldestExpiredAgeSeconds: row?.oldest ?? 0 };
  }
}
