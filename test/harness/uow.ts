/**
 * The PostgreSQL unit of work a test file writes through: a pool as the
 * application role on the file's own database (ended at teardown), its
 * PgDatabase and a PgUnitOfWork with the suite's usual timeouts, each
 * overridable. One place for the setup about a dozen files made by hand.
 */
import type { Test } from 'tap';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { PgDatabase, PgUnitOfWork, type PgUnitOfWorkOptions } from '../../platform/pg/uow.js';
import type { TestDatabase } from './db.js';

/** The suite's usual unit-of-work settings: generous timeouts, three retries. */
export const TEST_UOW_DEFAULTS: PgUnitOfWorkOptions = {
  lockTimeoutMs: 5000,
  statementTimeoutMs: 30_000,
  transactionTimeoutMs: 60_000,
  retryMax: 3,
};

/** Options of {@link testUnitOfWork}: the pool's, then any unit-of-work setting to override. */
export interface TestUnitOfWorkOptions extends Partial<PgUnitOfWorkOptions> {
  /** The pool's `application_name`, which names the file in pg_stat_activity; default `test`. */
  readonly applicationName?: string;
  /** The pool's size; default 4. */
  readonly max?: number;
  /** Where the pool connects; default the database's application-role URL. */
  readonly url?: string;
  /** A pool to use instead of a new one (the test database's own `app`, say): not ended here. */
  readonly sql?: Sql;
  /** Make a span of every statement (platform/pg/statement-spans.ts); default false. */
  readonly traceStatements?: boolean;
}

/** What {@link testUnitOfWork} made. */
export interface TestUnitOfWork {
  /** The pool. */
  readonly sql: Sql;
  /** The database port over it. */
  readonly db: PgDatabase;
  /** The unit of work over it. */
  readonly uow: PgUnitOfWork;
}

/**
 * Makes the pool, the database port and the unit of work of a test.
 *
 * @param t the test whose teardown ends the pool it made.
 * @param tdb the test's database.
 * @param options the pool's name and size, and unit-of-work overrides.
 * @returns the pool, the port and the unit of work.
 */
export function testUnitOfWork(
  t: Test,
  tdb: TestDatabase,
  options: TestUnitOfWorkOptions,
): TestUnitOfWork {
  const {
    applicationName = 'test',
    max = 4,
    url = tdb.appUrl,
    sql: given,
    traceStatements = false,
    ...settings
  } = options;
  let sql = given;
  if (sql === undefined) {
    const made = createSql(url, { max, applicationName });
    t.teardown(() => made.end({ timeout: 1 }));
    sql = made;
  }
  const db = new PgDatabase(sql, { traceStatements });
  return { sql, db, uow: new PgUnitOfWork(db, { ...TEST_UOW_DEFAULTS, ...settings }) };
}
