/**
 * The physical limit of the transfer on this machine: the same move of
 * money as the ledger's use case, written as raw postgres.js, one statement
 * in an implicit transaction (lock both accounts in id order, move, record
 * the transfer), with the pool and callers of the in-process ceiling.
 * Keyed, the same statement also inserts the key's row already completed.
 * No unit of work, no token read, no plugin: what PostgreSQL and one round
 * trip cost. Every other ratio of `make bench` is read against its ratios.
 */
import { createHash } from 'node:crypto';
import { newId } from '../../kernel/ids/index.js';
import type { Sql } from '../../platform/pg/client.js';
import type { LoadFigures } from './load.js';
import { driveCalls } from './ceiling.js';

/** What the limit drives. */
export interface LimitOptions {
  /** A pool as the application role, sized like the ceiling's. */
  readonly sql: Sql;
  /** The principal that owns the accounts. */
  readonly principalId: string;
  /** Builds each call's transfer body (JSON, as the HTTP load sends it). */
  readonly nextBody: () => string;
  readonly concurrency: number;
  readonly seconds: number;
  /** Insert the key's completed row in the same statement. */
  readonly keyed: boolean;
  /** `sync.idempotency_key_ttl`, in ms. */
  readonly ttlMs: number;
  /** The postmaster, for PostgreSQL's CPU time. */
  readonly postmasterPid: number;
}

async function call(o: LimitOptions, body: string): Promise<void> {
  const parsed = JSON.parse(body) as {
    from_account_id: string;
    to_account_id: string;
    amount: number;
  };
  const { from_account_id: from, to_account_id: to, amount } = parsed;
  const id = newId();
  const at = new Date();
  const principal = o.principalId;
  const rows = o.keyed
    ? await o.sql<{ moved: number }[]>`
        with locked as materialized (
          select id from ledger_accounts
           where id in (${from}::uuid, ${to}::uuid) and principal_id = ${principal}
           order by id for update
        ),
        moved as (
          update ledger_accounts a
             set balance = case when a.id = ${from}::uuid then a.balance - ${amount}::bigint
                                else a.balance + ${amount}::bigint end,
                 version = a.version + 1, updated_at = ${at}
           where a.id in (select id from locked) and a.principal_id = ${principal}
          returning a.id
        ),
        recorded as (
          insert into ledger_transfers
                 (id, principal_id, from_account_id, to_account_id, amount, created_at)
          values (${id}, ${principal}, ${from}::uuid, ${to}::uuid, ${amount}::bigint, ${at})
          returning id
        ),
        keyed as (
          insert into idempotency_keys
                 (principal_id, key, action, request_sha256, state, response_status,
                  response_body, resource_id, created_at, expires_at)
          values (${principal}, ${newId()}, 'createTransfer',
                  ${createHash('sha256').update(body).digest()}, 'completed', 201,
                  ${o.sql.json({ id, from_account_id: from, to_account_id: to, amount })},
                  ${id}, ${at}, ${new Date(at.getTime() + o.ttlMs)})
          returning 1
        )
        select (select count(*) from moved)::int as moved,
               (select count(*) from recorded)::int + (select count(*) from keyed)::int as n`
    : await o.sql<{ moved: number }[]>`
        with locked as materialized (
          select id from ledger_accounts
           where id in (${from}::uuid, ${to}::uuid) and principal_id = ${principal}
           order by id for update
        ),
        moved as (
          update ledger_accounts a
             set balance = case when a.id = ${from}::uuid then a.balance - ${amount}::bigint
                                else a.balance + ${amount}::bigint end,
                 version = a.version + 1, updated_at = ${at}
           where a.id in (select id from locked) and a.principal_id = ${principal}
          returning a.id
        ),
        recorded as (
          insert into ledger_transfers
                 (id, principal_id, from_account_id, to_account_id, amount, created_at)
          values (${id}, ${principal}, ${from}::uuid, ${to}::uuid, ${amount}::bigint, ${at})
          returning id
        )
        select (select count(*) from moved)::int as moved,
               (select count(*) from recorded)::int as n`;
  if (rows[0]?.moved !== 2) throw new Error('a limit transfer did not move both accounts');
}

/**
 * Runs the callers for the given time and reports what the ceiling reports.
 *
 * @param o what to drive and how hard.
 * @returns the figures, in the shape of an HTTP load's.
 * @throws Error when a call fails (every call must succeed).
 */
export function runLimit(o: LimitOptions): Promise<LoadFigures> {
  return driveCalls(o, () => call(o, o.nextBody()));
}
