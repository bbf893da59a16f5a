/**
 * The idempotency store over PostgreSQL (table `idempotency_keys`). `begin`
 * and `complete` run in the request's own transaction, so the key row and
 * the request's effect commit together; `find` reads committed rows through
 * the pool for the replay fast path.
 */
import type { Id } from '../../../../kernel/ids/index.js';
import {
  RequestInProgressError,
  type IdempotencyEntry,
  type IdempotencyRequest,
  type IdempotencyStore,
  type StoredResponse,
} from '../../../../kernel/idempotency/index.js';
import { markNonRetryable } from '../../../../kernel/txn/index.js';
import type { PgDatabase } from '../../../../platform/pg/uow.js';

interface KeyRow {
  request_sha256: Buffer;
  state: string;
  response_status: number | null;
  response_body: unknown;
  resource_id: string | null;
  expires_at: Date;
}

function toEntry(row: KeyRow): IdempotencyEntry {
  return {
    sha256: row.request_sha256,
    completed: row.state === 'completed',
    status: row.response_status ?? 0,
    body: row.response_body ?? null,
    resourceId: (row.resource_id as Id | null) ?? null,
  };
}

/** How many times `begin` starts over when the row it waited for vanished (cleaned up meanwhile). */
const MAX_BEGIN_ROUNDS = 5;

/** {@link IdempotencyStore} over postgres.js. */
export class PgIdempotencyStore implements IdempotencyStore {
  /** @param db the database handle whose ambient transaction `begin` and `complete` join. */
  constructor(private readonly db: PgDatabase) {}

  /** @inheritdoc */
  async find(principalId: Id, key: Id, now: Date): Promise<IdempotencyEntry | null> {
    const sql = this.db.poolOutsideTransaction('the idempotency replay read');
    const rows = await sql<KeyRow[]>`
      select request_sha256, state, response_status, response_body, resource_id, expires_at
        from idempotency_keys
       where principal_id = ${principalId} and key = ${key}
         and state = 'completed' and expires_at > ${now}`;
    const row = rows[0];
    return row === undefined ? null : toEntry(row);
  }

  /** @inheritdoc */
  async begin(req: IdempotencyRequest): Promise<IdempotencyEntry | null> {
    const tx = this.db.tx('taking an idempotency key');
    const expiresAt = new Date(req.now.getTime() + req.ttlMs);
    for (let round = 0; round < MAX_BEGIN_ROUNDS; round++) {
      try {
        // Both statements are sent at once (postgres.js pipelines them on the
        // transaction's connection): an expired row is deleted, then the key
        // is inserted. A concurrent uncommitted insert of the same key makes
        // the insert wait at the primary key until that transaction ends.
        const purge = tx`
          delete from idempotency_keys
           where principal_id = ${req.principalId} and key = ${req.key} and expires_at <= ${req.now}`.execute();
        const inserted = tx<{ taken: number }[]>`
          insert into idempotency_keys
                 (principal_id, key, action, request_sha256, state, created_at, expires_at)
          values (${req.principalId}, ${req.key}, ${req.action}, ${Buffer.from(req.sha256)}, 'in_progress',
                  ${req.now}, ${expiresAt})
          on conflict (principal_id, key) do nothing
          returning 1 as taken`.execute();
        await purge;
        if ((await inserted).length > 0) return null;
      } catch (err) {
        if ((err as { code?: string }).code === '55P03') {
          // The first request still holds the key: not a retryable lock timeout.
          throw markNonRetryable(new RequestInProgressError({ cause: err }));
        }
        throw err;
      }
      const rows = await tx<KeyRow[]>`
        select request_sha256, state, response_status, response_body, resource_id, expires_at
          from idempotency_keys
         where principal_id = ${req.principalId} and key = ${req.key}`;
      const row = rows[0];
      // Gone (cleaned up) or expired since the insert looked: begin again.
      if (row === undefined || row.expires_at.getTime() <= req.now.getTime()) continue;
      return toEntry(row);
    }
    throw new Error(
      `could not take idempotency key ${req.key} after ${String(MAX_BEGIN_ROUNDS)} rounds`,
    );
  }

  /** @inheritdoc */
  async complete(req: IdempotencyRequest, res: StoredResponse): Promise<void> {
    const tx = this.db.tx('storing an idempotent answer');
    const body =
      res.body === null || res.body === undefined
        ? null
        : tx.json(res.body as Parameters<typeof tx.json>[0]);
    const updated = await tx`
      update idempotency_keys
         set state = 'completed', response_status = ${res.status}, response_body = ${body},
             resource_id = ${res.resourceId}
       where principal_id = ${req.principalId} and key = ${req.key} and state = 'in_progress'`;
    if (updated.count !== 1) {
      throw new Error(`idempotency key ${req.key} was not in progress in this transaction`);
    }
  }
}
