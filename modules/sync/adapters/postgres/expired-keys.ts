/**
 * Deleting expired idempotency keys in batches, for the cleanup job.
 */
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import type { ExpiredKeys } from '../../app/cleanup.js';

/**
 * {@link ExpiredKeys} over postgres.js. Each batch is one statement (its own
 * transaction): it picks up to `limit` expired rows in `expires_at` order and
 * deletes them by ctid, which was measured about twice as fast as joining on
 * the primary key. The rows are not locked first (`FOR UPDATE SKIP LOCKED`
 * wrote every row twice and cost a fifth of the speed): a row a concurrent
 * run or request deletes first is waited for and then skipped, and a row
 * replaced meanwhile has another ctid and is left alone.
 */
export class PgExpiredKeys implements ExpiredKeys {
  /** @param db the database handle; batches run on the pool. */
  constructor(private readonly db: PgDatabase) {}

  /** @inheritdoc */
  async deleteBatch(now: Date, limit: number): Promise<number> {
    const sql = this.db.poolOutsideTransaction('deleting expired idempotency keys');
    const result = await sql`
      delete from idempotency_keys
       where ctid = any(array(
               select ctid from idempotency_keys
                where expires_at <= ${now}
                order by expires_at
                limit ${limit}))`;
    return result.count;
  }
}
