/**
 * The key's cost, piece by piece: the unkeyed transfer as the server sends
 * it (BEGIN, the transfer with its plan settings, then the COMMIT with its
 * settings, two writes), then the same with each piece of the keyed shape
 * of 01-idempotency.md added in turn, as raw postgres.js on a reserved
 * connection, no unit of work and no HTTP:
 *
 * - `shape_row`: the key's completed row inserted in the first write (what
 *   a key costs at the least: one row, no extra round trip);
 * - `shape_update`: the row inserted in progress in the first write, then
 *   completed by an UPDATE sent with the COMMIT (the design's insert, then
 *   a HOT completion);
 * - `shape_savepoint`: a SAVEPOINT after the insert, in the same write;
 * - `shape_round_trip`: the transfer sent only once the insert is answered
 *   (a duplicate must never run the handler): the whole keyed shape.
 *
 * Each scenario's PostgreSQL CPU per transaction less the one before is
 * what that piece costs (docs/performance.md). Beside them, not one piece
 * more but another shape of the same guarantees:
 *
 * - `shape_advisory`: the key's turn taken by a transaction-level advisory
 *   lock on a hash of the principal and key, with a read of the key's row
 *   and the savepoint, in the first write; the transfer once they are
 *   answered; the key's row inserted completed with the COMMIT. A
 *   duplicate waits on the lock as it waits on the row today, and meets
 *   the committed row when it gets the lock; no row in progress, so no
 *   completion UPDATE.
 */
import { createHash } from 'node:crypto';
import { newId } from '../../kernel/ids/index.js';
import type { Sql } from '../../platform/pg/client.js';
import { driveCalls } from './ceiling.js';
import type { LoadFigures } from './load.js';

/** The pieces, each scenario holding every piece before it; then `advisory`, another shape. */
export const SHAPES = ['unkeyed', 'row', 'update', 'savepoint', 'round_trip', 'advisory'] as const;
/** One of {@link SHAPES}. */
export type Shape = (typeof SHAPES)[number];

/** What a shape scenario drives. */
export interface ShapeOptions {
  /** A pool as the application role, sized like the ceiling's. */
  readonly sql: Sql;
  /** The principal that owns the accounts. */
  readonly principalId: string;
  /** The accounts, two of which each transfer moves 1 between. */
  readonly accounts: readonly string[];
  readonly shape: Shape;
  readonly concurrency: number;
  readonly seconds: number;
  /** `sync.idempotency_key_ttl`, in ms. */
  readonly ttlMs: number;
  /** The postmaster, for PostgreSQL's CPU time. */
  readonly postmasterPid: number;
}

function pick(items: readonly string[]): string {
  return items[Math.floor(Math.random() * items.length)]!;
}

async function call(o: ShapeOptions): Promise<void> {
  const from = pick(o.accounts);
  let to = pick(o.accounts);
  while (to === from) to = pick(o.accounts);
  const id = newId();
  const key = newId();
  const at = new Date();
  const expires = new Date(at.getTime() + o.ttlMs);
  const sha256 = createHash('sha256').update(id).digest();
  const answer = JSON.stringify({ id, from_account_id: from, to_account_id: to, amount: 1 });
  const p = o.principalId;
  const inProgress = o.shape === 'update' || o.shape === 'savepoint' || o.shape === 'round_trip';
  const tx = await o.sql.reserve();
  // The key row written once, completed: the `row` shape with the transfer,
  // the `advisory` shape with the COMMIT.
  const completedRow = (): Promise<unknown> =>
    tx`insert into idempotency_keys
              (principal_id, key, action, request_sha256, state, response_status,
               response_body, resource_id, created_at, expires_at)
       values (${p}, ${key}, 'createTransfer', ${sha256}, 'completed', 201,
               (${answer}::text)::jsonb, ${id}, ${at}, ${expires})`.execute();
  try {
    const first: Promise<unknown>[] = [tx`begin isolation level read committed`.execute()];
    if (inProgress) {
      first.push(
        tx`insert into idempotency_keys
                  (principal_id, key, action, request_sha256, state, created_at, expires_at)
           values (${p}, ${key}, 'createTransfer', ${sha256}, 'in_progress', ${at}, ${expires})
           on conflict (principal_id, key) do nothing
           returning 1 as taken`.execute(),
      );
      if (o.shape !== 'update') first.push(tx`savepoint s1`.execute());
    }
    if (o.shape === 'advisory') {
      first.push(
        tx`select pg_advisory_xact_lock(hashtextextended(${p}::text || ${key}::text, 0))`.execute(),
        tx`select state from idempotency_keys where principal_id = ${p} and key = ${key}`.execute(),
        tx`savepoint s1`.execute(),
      );
    }
    if (o.shape === 'round_trip' || o.shape === 'advisory') {
      await Promise.all(first);
      first.length = 0;
    }
    first.push(
      tx`select set_config('plan_cache_mode', 'force_generic_plan', true),
                set_config('enable_seqscan', 'off', true)`.execute(),
      tx`with locked as materialized (
           select id from ledger_accounts
            where id in (${from}::uuid, ${to}::uuid) and principal_id = ${p}
            order by id for update),
         moved as (
           update ledger_accounts a
              set balance = case when a.id = ${from}::uuid then a.balance - 1
                                 else a.balance + 1 end,
                  version = a.version + 1, updated_at = ${at}
            where a.id in (select id from locked) and a.principal_id = ${p}
           returning a.id),
         recorded as (
           insert into ledger_transfers
                  (id, principal_id, from_account_id, to_account_id, amount, created_at)
           values (${id}, ${p}, ${from}::uuid, ${to}::uuid, 1, ${at})
           returning id)
         select (select count(*) from moved)::int as moved`.execute(),
      tx`select set_config('plan_cache_mode', 'force_custom_plan', true),
                set_config('enable_seqscan', 'on', true)`.execute(),
    );
    if (o.shape === 'row') first.push(completedRow());
    await Promise.all(first);
    const last: Promise<unknown>[] = [];
    if (inProgress) {
      last.push(
        tx`with done as (
             update idempotency_keys
                set state = 'completed', response_status = 201,
                    response_body = (${answer}::text)::jsonb, resource_id = ${id}
              where principal_id = ${p} and key = ${key} and state = 'in_progress'
             returning 1)
           select case when n = 1 then n
                       else (n::text || ' idempotency keys completed instead of 1')::int end as ok
             from (select count(*)::int as n from done) as c`.execute(),
      );
    }
    if (o.shape === 'advisory') last.push(completedRow());
    last.push(
      tx`select set_config('statement_timeout', '0', true),
                set_config('transaction_timeout', '0', true)`.execute(),
      tx`commit`.execute(),
    );
    await Promise.all(last);
  } catch (err) {
    await tx`rollback`.execute().catch(() => undefined);
    throw err;
  } finally {
    tx.release();
  }
}

/**
 * Runs the callers of one shape for the given time (see `driveCalls` in
 * ceiling.ts).
 *
 * @param o the shape, what to drive and how hard.
 * @returns the figures, in the shape of an HTTP load's.
 * @throws Error when a call fails (every call must succeed).
 */
export function runShape(o: ShapeOptions): Promise<LoadFigures> {
  return driveCalls(o, () => call(o));
}
