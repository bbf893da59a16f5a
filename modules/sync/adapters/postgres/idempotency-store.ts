/**
 * The idempotency store over PostgreSQL (table `idempotency_keys`). `begin`
 * and `completeAtCommit` run in the request's own transaction, so the key row and
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
import type { TransactionSql } from '../../../../platform/pg/client.js';
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import { ReplayCache, type ReplayCacheOptions } from '../../app/replay-cache.js';

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

/**
 * A lock timeout while inserting a key means the first request still holds
 * it: not a retryable lock timeout but "in progress".
 *
 * @param err what the insert threw.
 * @returns the error to throw.
 */
function inProgressOr(err: unknown): unknown {
  if ((err as { code?: string }).code === '55P03') {
    return markNonRetryable(new RequestInProgressError({ cause: err }));
  }
  return err;
}

/**
 * The largest stored answer the replay cache keeps, in bytes of its JSON
 * text: a bound on the memory an entry holds (the cache's size bounds how
 * many).
 */
export const MAX_CACHED_BODY_BYTES = 4_096;

/** Options of {@link PgIdempotencyStore}. */
export interface PgIdempotencyStoreOptions {
  /**
   * Answer repeats of completed keys read before from memory
   * (`sync.idempotency_replay_cache_ttl` and `_size`); absent, every replay
   * reads the database.
   */
  readonly replayCache?: ReplayCacheOptions;
}

/** How many times `begin` starts over when the row it waited for vanished (cleaned up meanwhile). */
const MAX_BEGIN_ROUNDS = 5;

/** {@link IdempotencyStore} over postgres.js. */
export class PgIdempotencyStore implements IdempotencyStore {
  readonly #cache: ReplayCache | undefined;

  /**
   * @param db the database handle whose ambient transaction `begin` and `completeAtCommit` join.
   * @param options the replay cache, when wanted.
   * @throws RangeError for replay cache options out of range.
   */
  constructor(
    private readonly db: PgDatabase,
    options: PgIdempotencyStoreOptions = {},
  ) {
    this.#cache =
      options.replayCache === undefined ? undefined : new ReplayCache(options.replayCache);
  }

  /**
   * @inheritdoc
   *
   * From the replay cache: answers this process stored, and completed rows
   * its `begin` met, each kept when its answer is at most
   * {@link MAX_CACHED_BODY_BYTES} of JSON. Without a cache, always null.
   */
  recall(principalId: Id, key: Id, now: Date): IdempotencyEntry | null {
    return this.#cache?.get(principalId, key, now) ?? null;
  }

  /**
   * @inheritdoc
   *
   * The insert is sent before this returns; `begin` does the same as its
   * first round.
   */
  take(req: IdempotencyRequest): Promise<boolean> {
    const inserted = this.insertKey(this.db.tx('taking an idempotency key'), req);
    return inserted.then(
      (rows) => rows.length > 0,
      (err: unknown) => {
        throw inProgressOr(err);
      },
    );
  }

  private insertKey(tx: TransactionSql, req: IdempotencyRequest): Promise<{ taken: number }[]> {
    const expiresAt = new Date(req.now.getTime() + req.ttlMs);
    return tx<{ taken: number }[]>`
      insert into idempotency_keys
             (principal_id, key, action, request_sha256, state, created_at, expires_at)
      values (${req.principalId}, ${req.key}, ${req.action}, ${Buffer.from(req.sha256)}, 'in_progress',
              ${req.now}, ${expiresAt})
      on conflict (principal_id, key) do nothing
      returning 1 as taken`.execute();
  }

  /** @inheritdoc */
  async begin(req: IdempotencyRequest): Promise<IdempotencyEntry | null> {
    const tx = this.db.tx('taking an idempotency key');
    // A fresh key, the common case, costs one statement: the insert. Only
    // when it finds a row does begin look at it, and an expired row is
    // deleted before the insert is tried again.
    let purge = false;
    for (let round = 0; round < MAX_BEGIN_ROUNDS; round++) {
      try {
        // Sent at once (postgres.js pipelines them on the transaction's
        // connection). A concurrent uncommitted insert of the same key makes
        // the insert wait at the primary key until that transaction ends.
        const purged = purge
          ? tx`
              delete from idempotency_keys
               where principal_id = ${req.principalId} and key = ${req.key}
                 and expires_at <= ${req.now}`.execute()
          : undefined;
        const inserted = this.insertKey(tx, req);
        await purged;
        if ((await inserted).length > 0) return null;
      } catch (err) {
        throw inProgressOr(err);
      }
      // The body's size only for the cache, and only when its stored form
      // is small (a larger one has a larger text): no serialization of a
      // large body.
      const rows = await tx<(KeyRow & { body_bytes: number | null })[]>`
        select request_sha256, state, response_status, response_body, resource_id, expires_at,
               case when pg_column_size(response_body) <= ${MAX_CACHED_BODY_BYTES}
                    then octet_length(response_body::text) end as body_bytes
          from idempotency_keys
         where principal_id = ${req.principalId} and key = ${req.key}`;
      const row = rows[0];
      if (row !== undefined && row.expires_at.getTime() > req.now.getTime()) {
        const entry = toEntry(row);
        // Met after the insert found it, so committed by another
        // transaction; a completed row never changes until it expires.
        const small =
          row.response_body === null ||
          (row.body_bytes !== null && row.body_bytes <= MAX_CACHED_BODY_BYTES);
        if (entry.completed && small) {
          this.#cache?.set(req.principalId, req.key, entry, row.expires_at);
        }
        return entry;
      }
      // Expired (delete it and insert again) or gone since the insert looked
      // (cleaned up meanwhile: insert again).
      purge = row !== undefined;
    }
    throw new Error(
      `could not take idempotency key ${req.key} after ${String(MAX_BEGIN_ROUNDS)} rounds`,
    );
  }

  /**
   * @inheritdoc
   *
   * The update is sent with the COMMIT (one round trip for both): if it
   * finds no key in progress, it raises an error, PostgreSQL rolls the whole
   * transaction back, and the unit of work rejects.
   */
  completeAtCommit(req: IdempotencyRequest, res: StoredResponse): Promise<void> {
    // The JSON text sent is the one the cache keeps the value of: a replay
    // from memory answers what a replay from the row would.
    const text = res.body === null || res.body === undefined ? null : JSON.stringify(res.body);
    const cache = this.#cache;
    const remember =
      cache === undefined || (text !== null && Buffer.byteLength(text) > MAX_CACHED_BODY_BYTES)
        ? undefined
        : () => {
            cache.set(
              req.principalId,
              req.key,
              {
                sha256: req.sha256,
                completed: true,
                status: res.status,
                body: text === null ? null : (JSON.parse(text) as unknown),
                resourceId: res.resourceId,
              },
              new Date(req.now.getTime() + req.ttlMs),
            );
          };
    // The error's text is built from the row count, so the planner cannot
    // fold it into a constant and raise it when nothing is wrong.
    this.db.sendWithCommit(
      'storing an idempotent answer',
      (tx) =>
        tx`
        with done as (
          update idempotency_keys
             set state = 'completed', response_status = ${res.status},
                 response_body = (${text}::text)::jsonb, resource_id = ${res.resourceId}
           where principal_id = ${req.principalId} and key = ${req.key} and state = 'in_progress'
          returning 1)
        select case when n = 1 then n
                    else (n::text || ' idempotency keys completed instead of 1')::int end as ok
          from (select count(*)::int as n from done) as c`.execute(),
      remember,
    );
    return Promise.resolve();
  }
}
