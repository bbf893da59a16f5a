/**
 * The `ledger_accounts` table over postgres.js. Balances are bigint columns
 * read back as text and turned into numbers only when they are safe
 * integers, which the table's checks guarantee.
 */
import { parseId, type Id } from '../../../../kernel/ids/index.js';
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import type { Account, AccountRepository, NewAccount, TransferChecks } from '../../app/ports.js';
import { toMinorUnits } from './minor-units.js';

interface AccountRow {
  readonly id: string;
  readonly principal_id: string;
  readonly name: string;
  readonly opening_balance: string;
  readonly balance: string;
  /** bigint in the table; read as text and converted (safe up to 2^53). */
  readonly version: string;
  readonly created_at: Date;
  readonly updated_at: Date;
}

function toAccount(row: AccountRow): Account {
  return {
    id: parseId(row.id),
    principalId: parseId(row.principal_id),
    name: row.name,
    openingBalance: toMinorUnits(row.opening_balance),
    balance: toMinorUnits(row.balance),
    version: Number(row.version),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** {@link AccountRepository} over PostgreSQL. */
export class PgAccountRepository implements AccountRepository {
  readonly #db: PgDatabase;

  /** @param db the database; writes join the ambient unit of work. */
  constructor(db: PgDatabase) {
    this.#db = db;
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async insert(account: NewAccount): Promise<Account> {
    const [row] = await this.#db.tx('opening an account')<AccountRow[]>`
      insert into ledger_accounts
             (id, principal_id, name, opening_balance, balance, version, created_at, updated_at)
      values (${account.id}, ${account.principalId}, ${account.name},
              ${account.openingBalance}::bigint, ${account.openingBalance}::bigint, 1,
              ${account.createdAt}, ${account.createdAt})
      returning id, principal_id, name, opening_balance::text, balance::text, version::text,
                created_at, updated_at`;
    if (row === undefined) throw new Error('insert into ledger_accounts returned no row');
    return toAccount(row);
  }

  /** @inheritdoc */
  async find(principalId: Id, id: Id): Promise<Account | null> {
    const [row] = await this.#db.sql()<AccountRow[]>`
      select id, principal_id, name, opening_balance::text, balance::text, version::text,
             created_at, updated_at
        from ledger_accounts
       where id = ${id} and principal_id = ${principalId}`;
    return row === undefined ? null : toAccount(row);
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async rename(
    principalId: Id,
    id: Id,
    change: { readonly name: string; readonly versions: readonly number[]; readonly at: Date },
  ): Promise<Account | null> {
    // The version test is in the UPDATE itself: under READ COMMITTED a
    // concurrent change that commits first is re-checked against it, so a
    // stale version never overwrites a newer one.
    const [row] = await this.#db.tx('renaming an account')<AccountRow[]>`
      update ledger_accounts
         set name = ${change.name}, version = version + 1, updated_at = ${change.at}
       where id = ${id} and principal_id = ${principalId}
         and version = any(${[...change.versions]}::bigint[])
      returning id, principal_id, name, opening_balance::text, balance::text, version::text,
                created_at, updated_at`;
    return row === undefined ? null : toAccount(row);
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   * @throws Error when every check held but the statement changed another
   *   number of accounts than two (a broken invariant, never a client's).
   */
  async transfer(
    principalId: Id,
    transfer: {
      readonly id: Id;
      readonly fromAccountId: Id | null;
      readonly toAccountId: Id | null;
      readonly amount: number;
      readonly at: Date;
    },
    maxBalance: number,
  ): Promise<TransferChecks> {
    const { id, fromAccountId: from, toAccountId: to, amount, at } = transfer;
    // One round trip instead of three (lock, move, record). The lock order:
    // FOR UPDATE locks rows as the sorted result yields them, so ORDER BY
    // id makes every transfer lock its accounts in ascending id order, and
    // crossed transfers (A to B while B to A) queue on the same first row
    // instead of deadlocking. Under READ COMMITTED a row changed by a
    // transaction that committed meanwhile is locked in its newest version
    // (and the UPDATE re-reads that version), so the checks see the balance
    // the move changes. The move and the record happen only when every
    // check holds; otherwise the statement writes nothing.
    const tx = this.#db.tx('making a transfer');
    // This statement runs on a generic plan: planning it on every
    // execution costs more than the round trips it saves (measured:
    // docs/performance.md). A generic plan is cached per connection, and on
    // a small table its cheapest form for two rows by primary key is a
    // sequential scan, which the cached plan keeps as the table's dead row
    // versions pile up: so sequential scans are off for it (and for its
    // foreign keys' checks, which run under the same settings), which
    // leaves the primary key and the (principal_id, id) key as the only
    // ways in (docs/DECISIONS.md, "A generic plan for the one statement of
    // a transfer"). Both settings are put back after it; all three
    // statements go in one write.
    const generic = tx`
      select set_config('plan_cache_mode', 'force_generic_plan', true),
             set_config('enable_seqscan', 'off', true)`.execute();
    const statement = tx<
      {
        has_from: boolean;
        has_to: boolean;
        funds: boolean;
        room: boolean;
        moved: number;
        recorded: number;
      }[]
    >`
      with locked as materialized (
        select id, balance
          from ledger_accounts
         where id in (${from}::uuid, ${to}::uuid) and principal_id = ${principalId}
         order by id
           for update
      ),
      checks as materialized (
        select exists (select 1 from locked where id = ${from}::uuid) as has_from,
               exists (select 1 from locked where id = ${to}::uuid) as has_to,
               coalesce((select balance >= ${amount}::bigint
                           from locked where id = ${from}::uuid), false) as funds,
               coalesce((select balance <= ${maxBalance}::bigint - ${amount}::bigint
                           from locked where id = ${to}::uuid), false) as room
      ),
      moved as (
        update ledger_accounts a
           set balance = case when a.id = ${from}::uuid
                              then a.balance - ${amount}::bigint
                              else a.balance + ${amount}::bigint end,
               version = a.version + 1,
               updated_at = ${at}
          from checks c
         where c.has_from and c.has_to and c.funds and c.room
           and a.id in (select id from locked) and a.principal_id = ${principalId}
        returning a.id
      ),
      recorded as (
        insert into ledger_transfers
               (id, principal_id, from_account_id, to_account_id, amount, created_at)
        select ${id}, ${principalId}, ${from}::uuid, ${to}::uuid, ${amount}::bigint, ${at}
          from checks c
         where c.has_from and c.has_to and c.funds and c.room
        returning id
      )
      select c.has_from, c.has_to, c.funds, c.room,
             (select count(*) from moved)::int as moved,
             (select count(*) from recorded)::int as recorded
        from checks c`.execute();
    const custom = tx`
      select set_config('plan_cache_mode', 'force_custom_plan', true),
             set_config('enable_seqscan', 'on', true)`.execute();
    const [, rows] = await Promise.all([generic, statement, custom]);
    const row = rows[0];
    if (row === undefined) throw new Error('a transfer statement returned no row');
    const checks = { from: row.has_from, to: row.has_to, funds: row.funds, room: row.room };
    const held = checks.from && checks.to && checks.funds && checks.room;
    if (held && (row.moved !== 2 || row.recorded !== 1)) {
      throw new Error(
        `a transfer changed ${String(row.moved)} accounts and recorded ${String(row.recorded)} transfers instead of 2 and 1`,
      );
    }
    return checks;
  }
}
