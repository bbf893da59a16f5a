/**
 * The `principals` table over postgres.js.
 */
import type { PrincipalInfo, PrincipalKind } from '../../../../kernel/actor/index.js';
import { parseId, type Id } from '../../../../kernel/ids/index.js';
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import type { NewPrincipal, PrincipalRepository } from '../../app/ports.js';

interface PrincipalRow {
  readonly id: string;
  readonly kind: PrincipalKind;
  readonly display_name: string;
  readonly created_at: Date;
  readonly disabled_at: Date | null;
}

/** {@link PrincipalRepository} over PostgreSQL. */
export class PgPrincipalRepository implements PrincipalRepository {
  readonly #db: PgDatabase;

  /** @param db the database; writes join the ambient unit of work. */
  constructor(db: PgDatabase) {
    this.#db = db;
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async insert(principal: NewPrincipal): Promise<void> {
    await this.#db.tx('creating a principal')`
      insert into principals (id, kind, display_name, created_at)
      values (${principal.id}, ${principal.kind}, ${principal.displayName}, ${principal.createdAt})`;
  }

  /** @inheritdoc */
  async find(id: Id): Promise<PrincipalInfo | null> {
    const [row] = await this.#db.sql()<PrincipalRow[]>`
      select id, kind, display_name, created_at, disabled_at
        from principals
       where id = ${id}`;
    if (row === undefined) return null;
    return {
      id: parseId(row.id),
      kind: row.kind,
      displayName: row.display_name,
      createdAt: row.created_at,
      disabledAt: row.disabled_at,
    };
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async disable(id: Id, at: Date): Promise<boolean> {
    const rows = await this.#db.tx('disabling a principal')`
      update principals
         set disabled_at = coalesce(disabled_at, ${at})
       where id = ${id}
      returning id`;
    return rows.length > 0;
  }
}
