/**
 * The `ledger_accounts` table over postgres.js. Balances are bigint columns
 * read back as text and turned into numbers only when they are safe
 * integers, which the table's checks guarantee.
 */
import { parseId, type Id } from '../../../../kernel/ids/index.js';
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import type { Account, AccountRepository, LockedAccount, NewAccount } from '../../app/ports.js';
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
   */
  async lockForTransfer(principalId: Id, ids: readonly Id[]): Promise<LockedAccount[]> {
    if (ids.length === 0) return [];
    // The lock order: FOR UPDATE locks rows as the sorted result yields
    // them, so ORDER BY id makes every transfer lock its accounts in
    // ascending id order. Crossed transfers (A to B while B to A) then queue
    // on the same first row instead of each holding one row and waiting for
    // the other: no deadlock.
    const rows = await this.#db.tx('locking accounts for a transfer')<
      { id: string; balance: string }[]
    >`
      select id, balance::text
        from ledger_accounts
       where id = any(${[...ids]}::uuid[]) and principal_id = ${principalId}
       order by id
         for update`;
    return rows.map((row) => ({ id: parseId(row.id), balance: toMinorUnits(row.balance) }));
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async move(
    principalId: Id,
    move: {
      readonly fromAccountId: Id;
      readonly toAccountId: Id;
      readonly amount: number;
      readonly at: Date;
    },
  ): Promise<void> {
    const result = await this.#db.tx('moving money between accounts')`
      update ledger_accounts
         set balance = case when id = ${move.fromAccountId}::uuid
                            then balance - ${move.amount}::bigint
                            else balance + ${move.amount}::bigint end,
             version = version + 1,
             updated_at = ${move.at}
       where id in (${move.fromAccountId}, ${move.toAccountId}) and principal_id = ${principalId}`;
    if (result.count !== 2) {
      throw new Error(`a transfer changed ${String(result.count)} accounts instead of 2`);
    }
  }
}
