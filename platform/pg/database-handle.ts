/**
 * The database handle adapters query through ({@link PgDatabase}): the
 * ambient transaction of the unit of work inside one (platform/pg/uow.ts),
 * the pool outside, with the pool's statements bounded and the
 * connections units of work reserve (transaction.ts).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import {
  PoolInsideTransactionError,
  refuseOutsideKeyedTransaction,
  TransactionRequiredError,
} from '../../kernel/txn/index.js';
import {
  sessionTimeoutsOf,
  type ISql,
  type SessionTimeouts,
  type Sql,
  type TransactionSql,
} from './client.js';
import { observed } from './observed.js';
import { statementSpans, type StatementSpans } from './statement-spans.js';
import {
  ConnectionStalledError,
  Reservations,
  settle,
  TransactionEndedError,
  type ConnectionTransaction,
  type Scope,
  type Settled,
} from './transaction.js';

/** @internal What the ambient storage holds for the current unit of work. */
export interface Frame {
  /** The client of the current scope: the transaction, or the innermost savepoint. */
  readonly tx: TransactionSql;
  /** The transaction the scope belongs to. */
  readonly txn: ConnectionTransaction;
  /** Where the current scope records its first failed statement. */
  readonly scope: Scope;
  /** 1 for the first run of the outermost function, 2 for its first retry, ... */
  readonly attempt: number;
  /**
   * Shared by the transaction and its savepoints: set when the transaction
   * ended under the function's feet (connection lost, transaction_timeout),
   * so later queries fail at once instead of going to a dead connection.
   */
  readonly life: { ended: unknown };
  /**
   * Shared by the transaction and its savepoints: statements sent with the
   * COMMIT ({@link PgDatabase.sendWithCommit}), settled, awaited after it.
   */
  readonly tails: Promise<Settled<unknown>>[];
  /**
   * Shared by the transaction and its savepoints: called once the COMMIT
   * is answered COMMIT ({@link PgDatabase.sendWithCommit}).
   */
  readonly onCommit: (() => void)[];
  /** True inside a savepoint (a nested run). */
  readonly nested: boolean;
}

/**
 * Access to the database for adapters: the ambient transaction when inside a
 * unit of work, the pool otherwise.
 */
export class PgDatabase {
  /** @internal the storage shared with the unit of work. */
  readonly storage = new AsyncLocalStorage<Frame>();

  private readonly pool: Sql;
  readonly #raw: Sql;
  #closing = false;
  /** @internal where units of work get their connections. */
  readonly reservations: Reservations;
  /** @internal where statements' spans begin; undefined when statements are not traced. */
  readonly statementSpans: StatementSpans | undefined;
  /** @internal the timeouts the pool's sessions start with, if it was made with them. */
  readonly sessionTimeouts: SessionTimeouts | undefined;
  #sessionTimeoutsConfirmed = false;

  /**
   * @param pool the application role's pool; its results are checked ({@link checkedResult}).
   * @param options `statementDeadlineMs`: how long a statement of the pool
   *   (outside any unit of work) may go unanswered before its caller gets
   *   `ConnectionStalledError` and the session it was written to is ended
   *   (0 or absent: no bound). The server passes `database.statement_timeout`
   *   plus `database.connect_timeout` plus {@link STALL_GRACE_MS}.
   *   `traceStatements`: make an OpenTelemetry span of every statement, the
   *   pool's and the units of work's (platform/pg/statement-spans.ts; the
   *   server sets it with `tracing.enabled`).
   */
  constructor(
    pool: Sql,
    options: { readonly statementDeadlineMs?: number; readonly traceStatements?: boolean } = {},
  ) {
    this.#raw = pool;
    this.statementSpans = options.traceStatements === true ? statementSpans : undefined;
    this.reservations = new Reservations(pool);
    this.sessionTimeouts = sessionTimeoutsOf(pool);
    const ms = options.statementDeadlineMs ?? 0;
    this.pool = observed(
      pool,
      () => undefined,
      () => undefined,
      undefined,
      ms > 0
        ? {
            ms,
            stalled: () => new ConnectionStalledError('a statement', ms),
            onStall: (query, madeAt) => {
              endSessionOf(pool, query, madeAt);
            },
          }
        : undefined,
      this.statementSpans,
    );
  }

  /**
   * The client to query with: the ambient transaction inside a unit of work,
   * else the pool.
   *
   * @returns a postgres.js client.
   * @throws TransactionEscapeError for the pool inside a keyed request
   *   (kernel/txn): a statement there would commit without the key.
   */
  sql(): ISql {
    const frame = this.storage.getStore();
    if (frame === undefined) {
      refuseOutsideKeyedTransaction('a statement through the pool');
      return this.pool;
    }
    if (frame.life.ended !== undefined) throw new TransactionEndedError(frame.life.ended);
    return frame.tx;
  }

  /**
   * The ambient transaction, for adapters whose statements are meaningful
   * only inside one (e.g. taking a key, adding a job).
   *
   * @param what the operation, for the error message.
   * @returns the transaction.
   * @throws TransactionRequiredError outside a unit of work.
   */
  tx(what: string): TransactionSql {
    const frame = this.storage.getStore();
    if (!frame) throw new TransactionRequiredError(what);
    if (frame.life.ended !== undefined) throw new TransactionEndedError(frame.life.ended);
    return frame.tx;
  }

  /**
   * The pool itself, for work that must not join a transaction (e.g. the
   * replay fast path's read). Refused inside a unit of work.
   *
   * @param what the operation, for the error message.
   * @returns the pool.
   * @throws PoolInsideTransactionError inside a unit of work;
   *   TransactionEscapeError inside a keyed request (kernel/txn).
   */
  poolOutsideTransaction(what: string): Sql {
    if (this.storage.getStore()) throw new PoolInsideTransactionError(what);
    refuseOutsideKeyedTransaction(what);
    return this.pool;
  }

  /**
   * Sends a statement of the ambient transaction without waiting for it:
   * postgres.js pipelines it with the COMMIT that follows, saving a round
   * trip. PostgreSQL runs them in order, so when the statement fails the
   * transaction is aborted and its COMMIT becomes a rollback; the unit of
   * work then rejects with the statement's error (retrying a retryable one)
   * as if the transaction had failed before COMMIT. For the last write of a
   * transaction whose result nothing depends on; a statement that must
   * report "nothing happened" has to raise an error itself.
   *
   * @param what the operation, for the error message.
   * @param build makes the statement on the transaction.
   * @param committed called once PostgreSQL answered the COMMIT with
   *   COMMIT (never after a rollback, a failed attempt that is retried, or a
   *   COMMIT without an answer); what it throws is ignored, since the caller
   *   must still learn that the transaction committed.
   * @throws TransactionRequiredError outside a unit of work.
   */
  sendWithCommit(
    what: string,
    build: (tx: TransactionSql) => PromiseLike<unknown>,
    committed?: () => void,
  ): void {
    const frame = this.storage.getStore();
    if (!frame) throw new TransactionRequiredError(what);
    if (frame.nested) {
      // A savepoint's ROLLBACK TO would clear the failure PostgreSQL
      // recorded, and the COMMIT would then commit what the failure was
      // meant to stop.
      throw new Error(
        `${what}: a statement sent with the COMMIT belongs to the outermost unit of work, not a savepoint`,
      );
    }
    if (frame.life.ended !== undefined) throw new TransactionEndedError(frame.life.ended);
    frame.tails.push(settle(build(frame.tx)));
    if (committed !== undefined) frame.onCommit.push(committed);
  }

  /**
   * Reads the timeouts a session of the pool really starts with and
   * compares them with those the pool was made with (createSql's `session`
   * option): parameters of the URL override startup options, and a pooler
   * may drop them. Only once they are confirmed does a unit of work whose
   * timeouts are the same skip sending them with each BEGIN. Never throws:
   * a failed read leaves them unconfirmed, so every BEGIN sends them.
   *
   * @returns whether they are confirmed.
   */
  async confirmSessionTimeouts(): Promise<boolean> {
    const want = this.sessionTimeouts;
    if (want === undefined) return false;
    try {
      const rows = await this.pool<{ name: string; setting: string }[]>`
        select name, setting from pg_settings
         where name in ('lock_timeout', 'statement_timeout', 'transaction_timeout')`;
      const got = new Map(rows.map((r) => [r.name, Number(r.setting)]));
      this.#sessionTimeoutsConfirmed =
        got.get('lock_timeout') === want.lockTimeoutMs &&
        got.get('statement_timeout') === want.statementTimeoutMs &&
        got.get('transaction_timeout') === want.transactionTimeoutMs;
    } catch {
      this.#sessionTimeoutsConfirmed = false;
    }
    return this.#sessionTimeoutsConfirmed;
  }

  /** @internal whether {@link confirmSessionTimeouts} found them as made. */
  get sessionTimeoutsConfirmed(): boolean {
    return this.#sessionTimeoutsConfirmed;
  }

  /** Whether {@link close} has begun. */
  get closing(): boolean {
    return this.#closing;
  }

  /**
   * Closes the pool: units of work still running finish, and each then
   * closes its connection instead of handing it back (postgres.js would
   * otherwise keep a reserved connection handed back during `end()` open
   * until the timeout).
   *
   * @param options postgres.js `end` options: `timeout` in seconds.
   */
  async close(options: { readonly timeout?: number } = {}): Promise<void> {
    this.#closing = true;
    await this.#raw.end(options);
  }

  /** The attempt number of the ambient unit of work (1 for the first run), or 0 outside one. */
  attempt(): number {
    return this.storage.getStore()?.attempt ?? 0;
  }
}

/**
 * Ends the session a stalled statement was written to, from another
 * connection of the pool: its own connection hears nothing, so the server
 * closing the session is what frees it (postgres.js reconnects it). A
 * statement never written (still waiting for a connection) names no
 * session, and nothing is done.
 */
function endSessionOf(pool: Sql, query: unknown, madeAt: Date): void {
  const pid = (query as { state?: { pid?: unknown } } | null)?.state?.pid;
  if (typeof pid !== 'number') return;
  // Only a session that began before the statement was made can be the one
  // it was written to: the driver's state names the connection's current
  // session, and a pid may be used again (on this server, or on another one
  // after a failover).
  pool`select pg_terminate_backend(pid) from pg_stat_activity
        where pid = ${pid} and backend_start <= ${madeAt}`.then(
    () => undefined,
    () => undefined,
  );
}
