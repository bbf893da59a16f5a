/**
 * The `ledger_transfers` table over postgres.js. A transfer is written once,
 * in the unit of work that moved its money, and never changed.
 */
import { parseId, type Id } from '../../../../kernel/ids/index.js';
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import type { Transfer, TransferRepository } from '../../app/ports.js';
import { toMinorUnits } from './minor-units.js';

interface TransferRow {
  readonly id: string;
  readonly principal_id: string;
  readonly from_account_id: string;
  readonly to_account_id: string;
  readonly amount: string;
  readonly created_at: Date;
}

/** {@link TransferRepository} over PostgreSQL. */
export class PgTransferRepository implements TransferRepository {
  readonly #db: PgDatabase;

  /** @param db the database; writes join the ambient unit of work. */
  constructor(db: PgDatabase) {
    this.#db = db;
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async insert(transfer: Transfer): Promise<void> {
    await this.#db.tx('recording a transfer')`
      insert into ledger_transfers (id, principal_id, from_account_id, to_account_id, amount, created_at)
      values (${transfer.id}, ${transfer.principalId}, ${transfer.fromAccountId},
              ${transfer.toAccountId}, ${transfer.amount}::bigint, ${transfer.createdAt})`;
  }

  /** @inheritdoc */
  async find(principalId: Id, id: Id): Promise<Transfer | null> {
    const [row] = await this.#db.sql()<TransferRow[]>`
      select id, principal_id, from_account_id, to_account_id, amount::text, created_at
        from ledger_transfers
       where id = ${id} and principal_id = ${principalId}`;
    if (row === undefined) return null;
    return {
      id: parseId(row.id),
      principalId: parseId(row.principal_id),
      fromAccountId: parseId(row.from_account_id),
      toAccountId: parseId(row.to_account_id),
      amount: toMinorUnits(row.amount),
      createdAt: row.created_at,
    };
  }
}
