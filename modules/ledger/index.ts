/**
 * The ledger module's public face: accounts holding a balance in minor units
 * and transfers between them, the reference module whose keyed writes have
 * effects that must not happen twice. Apps and tests import the module
 * through this file only.
 *
 * @packageDocumentation
 */
import type { Clock } from '../../kernel/clock/index.js';
import type { UnitOfWork } from '../../kernel/txn/index.js';
import type { ModuleDescriptor } from '../../platform/module/index.js';
import type { PgDatabase } from '../../platform/pg/uow.js';
import { PgAccountRepository } from './adapters/postgres/accounts.js';
import { PgTransferRepository } from './adapters/postgres/transfers.js';
import { LedgerService } from './app/ledger-service.js';
import { registerLedgerRoutes } from './http/routes.js';

export { ACCOUNT_NAME_MAX, MAX_MINOR_UNITS, type LedgerService } from './app/ledger-service.js';

/** What the ledger module is built from. */
export interface LedgerDeps {
  /** The application role's database access (ambient transaction or pool). */
  readonly db: PgDatabase;
  /** The unit of work every write runs in (joined by keyed requests). */
  readonly uow: UnitOfWork;
  /** Where every time (opening, change, transfer) comes from. */
  readonly clock: Clock;
}

/** The assembled ledger module. */
export interface LedgerModule {
  /** What the composition root registers: name `ledger` and the /api/v1 routes. */
  readonly descriptor: ModuleDescriptor;
  /**
   * The use cases the routes call, over the PostgreSQL adapters: for
   * callers without HTTP (the benchmark's in-process ceiling).
   */
  readonly service: LedgerService;
}

/**
 * Assembles the ledger module over PostgreSQL.
 *
 * @param deps database, unit of work and clock.
 * @returns the module descriptor (routes `/api/v1/accounts...` and
 *   `/api/v1/transfers...`; no tasks or cron items) and its service.
 * @example
 * const ledger = createLedgerModule({ db, uow, clock });
 * const modules = [identity.descriptor, sync.descriptor, ledger.descriptor];
 */
export function createLedgerModule(deps: LedgerDeps): LedgerModule {
  const ledger = new LedgerService({
    uow: deps.uow,
    clock: deps.clock,
    accounts: new PgAccountRepository(deps.db),
    transfers: new PgTransferRepository(deps.db),
  });
  return {
    descriptor: {
      name: 'ledger',
      routes: (app) => {
        registerLedgerRoutes(app, ledger);
      },
    },
    service: ledger,
  };
}
