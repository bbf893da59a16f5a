/**
 * The `ledger_transfers` table over postgres.js, for reading. A transfer is
 * written once, by the statement that moves its money
 * (PgAccountRepository.transfer), and never changed.
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

  /** @param db the database; reads join the ambient unit of work, if any. */
  constructor(db: PgDatabase) {
    this.#db = db;
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
