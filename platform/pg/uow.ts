/**
 * The unit of work over postgres.js: one AsyncLocalStorage holds the current
 * transaction, adapters reach it through {@link PgDatabase}, and the
 * outermost run retries what PostgreSQL calls retryable.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  isRetryable,
  PoolInsideTransactionError,
  TransactionRequiredError,
  type UnitOfWork,
  type UnitOfWorkOptions,
} from '../../kernel/txn/index.js';
import type { ISql, Sql, TransactionSql } from './client.js';

/** What the ambient storage holds for the current unit of work. */
interface Frame {
  /** The transaction, or the innermost savepoint's handle. */
  readonly tx: TransactionSql;
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
  /** True inside a savepoint (a nested run). */
  readonly nested: boolean;
}

/**
 * Thrown by {@link PgDatabase} when code keeps using a unit of work whose
 * transaction already ended (its connection was lost or it timed out).
 */
export class TransactionEndedError extends Error {
  override readonly name = 'TransactionEndedError';
  /** Maps to 503 like a lost connection: the client may try again. */
  readonly code = 'CONNECTION_CLOSED';
  /** @param cause why the transaction ended. */
  constructor(cause: unknown) {
    super("the unit of work's transaction has ended (connection lost or timed out)", { cause });
  }
}

/** Timeouts applied to every transaction, in milliseconds (0 disables one). */
export interface TransactionTimeouts {
  readonly lockTimeoutMs: number;
  readonly statementTimeoutMs: number;
  readonly transactionTimeoutMs: number;
}

/**
 * The unit of work's settings from the `database` configuration group: the
 * three timeouts and the retries, the same for the server and the CLI.
 *
 * @param database `database.lock_timeout`, `statement_timeout`,
 *   `transaction_timeout` (ms) and `tx_retry_max`.
 * @returns the options of {@link PgUnitOfWork}.
 */
export function unitOfWorkSettings(database: {
  readonly lock_timeout: number;
  readonly statement_timeout: number;
  readonly transaction_timeout: number;
  readonly tx_retry_max: number;
}): PgUnitOfWorkOptions {
  return {
    lockTimeoutMs: database.lock_timeout,
    statementTimeoutMs: database.statement_timeout,
    transactionTimeoutMs: database.transaction_timeout,
    retryMax: database.tx_retry_max,
  };
}

/** Context given to the test fault hook. */
export interface FaultContext {
  /** The attempt about to commit (1 is the first run). */
  readonly attempt: number;
  /** The unit of work's name, when given. */
  readonly name: string | undefined;
}

/** Options of {@link PgUnitOfWork}. */
export interface PgUnitOfWorkOptions extends TransactionTimeouts {
  /** Retries after the first attempt (`database.tx_retry_max`). */
  readonly retryMax: number;
  /** Base of the jittered exponential backoff between attempts, in ms (default 5). */
  readonly backoffBaseMs?: number;
  /**
   * Test only: called after `fn` resolves and before COMMIT; a SQLSTATE it
   * returns is raised by PostgreSQL itself in the transaction, so the failure
   * is as real as a deadlock would be.
   */
  readonly faultHook?: (ctx: FaultContext) => string | undefined;
  /** Called before each retry, for logs and metrics. */
  readonly onRetry?: (ctx: { attempt: number; code: string; name: string | undefined }) => void;
}

/**
 * Errors that mean the transaction's connection is gone: the server ended the
 * session (terminate, shutdown, failover, transaction or idle timeout) or the
 * socket closed.
 */
const CONNECTION_LOST: ReadonlySet<string> = new Set([
  '57P01',
  '57P02',
  '57P03',
  '25P03',
  '25P04',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
]);

function connectionLost(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (CONNECTION_LOST.has(code) || code.startsWith('08'));
}

/**
 * Thrown instead of a result whose rows outnumber its row count. postgres.js
 * 3.4.9 keeps the row index of a query cut off mid-result (its connection
 * lost after some rows) and writes the next query's rows after it
 * (porsager/postgres#1119, #1181): a one-row answer would come back as
 * `[<hole>, row]` and be read as "no row" (a wrong 401 or 404). The caller
 * gets a 503 to retry instead; the driver's next result is whole again.
 */
export class IncompleteResultError extends Error {
  override readonly name = 'IncompleteResultError';
  /** Maps to 503, like a lost connection: the client may try again. */
  readonly code = 'RESULT_INCOMPLETE';
  /**
   * @param length the rows handed back.
   * @param count the rows PostgreSQL reported.
   */
  constructor(length: number, count: number) {
    super(
      `the database driver handed back ${String(length)} rows for a result of ${String(count)}: its state is stale after a lost connection`,
    );
  }
}

/**
 * Refuses a result with more rows than PostgreSQL counted (see
 * {@link IncompleteResultError}); a statement that returns no rows (an
 * UPDATE without RETURNING) has fewer, which is fine.
 *
 * @param value a query's result.
 * @returns the same value.
 * @throws IncompleteResultError for a result with holes.
 */
export function checkedResult<V>(value: V): V {
  if (Array.isArray(value)) {
    const count = (value as { count?: unknown }).count;
    if (typeof count === 'number' && value.length > count) {
      throw new IncompleteResultError(value.length, count);
    }
  }
  return value;
}

/**
 * Wraps a lazy postgres.js query's `then` on the instance (never attached
 * eagerly: a fragment interpolated into another query must never run), so
 * its result is checked and its error seen first by `onError`.
 */
function observe<Q>(query: Q, onError: (err: unknown) => void): Q {
  if (
    typeof query !== 'object' ||
    query === null ||
    typeof (query as { then?: unknown }).then !== 'function'
  ) {
    return query;
  }
  const pending = query as unknown as PromiseLike<unknown> & {
    then: PromiseLike<unknown>['then'];
  };
  const then = pending.then.bind(pending);
  Object.defineProperty(pending, 'then', {
    configurable: true,
    writable: true,
    value: (onFulfilled?: (v: unknown) => unknown, onRejected?: (e: unknown) => unknown) =>
      then(
        (v: unknown) => {
          try {
            checkedResult(v);
          } catch (err) {
            // Handed to the caller's own handler: `await` ignores the promise
            // then() returns, so a throw here would never reach it.
            if (onRejected) return onRejected(err);
            throw err;
          }
          return onFulfilled ? onFulfilled(v) : v;
        },
        (err: unknown) => {
          onError(err);
          if (onRejected) return onRejected(err);
          throw err;
        },
      ),
  });
  return query;
}

/**
 * A client whose statements (tagged templates and `unsafe`) are observed:
 * `before` runs first and may throw, and each result is checked and its
 * error passed to `onError`. Everything else (`begin`, `json`, identifiers)
 * passes through.
 */
function observed<S extends ISql>(sql: S, before: () => void, onError: (err: unknown) => void): S {
  return new Proxy(sql, {
    apply(target, thisArg, args: unknown[]) {
      // Only tagged templates run statements; sql(identifier) builds a fragment.
      const isTemplate =
        Array.isArray(args[0]) && Object.prototype.hasOwnProperty.call(args[0], 'raw');
      if (isTemplate) before();
      const result: unknown = Reflect.apply(target, thisArg, args);
      return isTemplate ? observe(result, onError) : result;
    },
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (property === 'unsafe' && typeof value === 'function') {
        return (...args: unknown[]) => {
          before();
          return observe((value as (...a: unknown[]) => unknown).apply(target, args), onError);
        };
      }
      return value;
    },
  });
}

const watchedCache = new WeakMap<TransactionSql, TransactionSql>();

/**
 * The frame's transaction client, watched: every query run through it marks
 * the transaction ended as soon as it fails because the connection is gone
 * (before the caller's own handler sees the error), and no query starts once
 * the transaction has ended. postgres.js would otherwise queue a statement on
 * the dead connection, whose write throws outside any promise. Results are
 * checked ({@link checkedResult}).
 */
function watched(frame: Frame): TransactionSql {
  const cached = watchedCache.get(frame.tx);
  if (cached) return cached;
  const { life } = frame;
  const proxy = observed(
    frame.tx,
    () => {
      if (life.ended !== undefined) throw new TransactionEndedError(life.ended);
    },
    (err) => {
      if (life.ended === undefined && connectionLost(err)) life.ended = err;
    },
  );
  watchedCache.set(frame.tx, proxy);
  return proxy;
}

/**
 * Access to the database for adapters: the ambient transaction when inside a
 * unit of work, the pool otherwise.
 */
export class PgDatabase {
  /** @internal the storage shared with the unit of work. */
  readonly storage = new AsyncLocalStorage<Frame>();

  private readonly pool: Sql;

  /** @param pool the application role's pool; its results are checked ({@link checkedResult}). */
  constructor(pool: Sql) {
    this.pool = observed(
      pool,
      () => undefined,
      () => undefined,
    );
  }

  /**
   * The client to query with: the ambient transaction inside a unit of work,
   * else the pool.
   *
   * @returns a postgres.js client.
   */
  sql(): ISql {
    const frame = this.storage.getStore();
    if (frame === undefined) return this.pool;
    if (frame.life.ended !== undefined) throw new TransactionEndedError(frame.life.ended);
    return watched(frame);
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
    return watched(frame);
  }

  /**
   * The pool itself, for work that must not join a transaction (e.g. the
   * replay fast path's read). Refused inside a unit of work.
   *
   * @param what the operation, for the error message.
   * @returns the pool.
   * @throws PoolInsideTransactionError inside a unit of work.
   */
  poolOutsideTransaction(what: string): Sql {
    if (this.storage.getStore()) throw new PoolInsideTransactionError(what);
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
   * @throws TransactionRequiredError outside a unit of work.
   */
  sendWithCommit(what: string, build: (tx: TransactionSql) => PromiseLike<unknown>): void {
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
    frame.tails.push(settle(build(watched(frame))));
  }

  /** The attempt number of the ambient unit of work (1 for the first run), or 0 outside one. */
  attempt(): number {
    return this.storage.getStore()?.attempt ?? 0;
  }
}

/**
 * {@link UnitOfWork} over postgres.js. See the port for the contract.
 */
export class PgUnitOfWork implements UnitOfWork {
  private readonly settings: readonly [string, string, string];

  /**
   * @param db the database whose ambient storage this unit of work fills.
   * @param options timeouts, retries and the test fault hook.
   */
  constructor(
    private readonly db: PgDatabase,
    private readonly options: PgUnitOfWorkOptions,
  ) {
    this.settings = [
      `${String(options.lockTimeoutMs)}ms`,
      `${String(options.statementTimeoutMs)}ms`,
      `${String(options.transactionTimeoutMs)}ms`,
    ];
  }

  /** @inheritdoc */
  inTransaction(): boolean {
    return this.db.storage.getStore() !== undefined;
  }

  /** @inheritdoc */
  async run<T>(fn: () => Promise<T>, options: UnitOfWorkOptions = {}): Promise<T> {
    const outer = this.db.storage.getStore();
    if (outer) {
      if (options.nested !== true) return fn();
      if (outer.life.ended !== undefined) throw new TransactionEndedError(outer.life.ended);
      return (await outer.tx.savepoint(async (sp) => {
        const outcome = await settle(
          this.db.storage.run(
            { tx: sp, attempt: outer.attempt, life: outer.life, tails: outer.tails, nested: true },
            fn,
          ),
        );
        // The transaction died while fn ran: settling now would make
        // postgres.js send ROLLBACK TO on the dead connection (see abandon()).
        if (outer.life.ended !== undefined) return abandon<T>();
        if (!outcome.ok) throw outcome.error;
        return outcome.value;
      })) as T;
    }
    const pool = this.db.poolOutsideTransaction('opening a unit of work');
    for (let attempt = 1; ; attempt++) {
      const life: { ended: unknown } = { ended: undefined };
      const tails: Promise<Settled<unknown>>[] = [];
      // An object, not a let: it is set inside the callback's closure.
      const progress = { fnSettled: true };
      try {
        const value = (await pool.begin('isolation level read committed', async (tx) => {
          // Sent without waiting: postgres.js pipelines it ahead of fn's first
          // statement on the same connection, saving a round trip.
          const configured = tx`
            select set_config('lock_timeout', ${this.settings[0]}, true),
                   set_config('statement_timeout', ${this.settings[1]}, true),
                   set_config('transaction_timeout', ${this.settings[2]}, true)`.execute();
          progress.fnSettled = false;
          const outcome = await settle(
            this.db.storage.run({ tx, attempt, life, tails, nested: false }, fn),
          );
          progress.fnSettled = true;
          // Never leave the settings promise unobserved, whatever fn did.
          const settings = await settle(configured);
          if (life.ended !== undefined) return abandon<T>();
          if (!outcome.ok) throw outcome.error;
          if (!settings.ok) throw settings.error;
          const fault = this.options.faultHook?.({ attempt, name: options.name });
          if (fault !== undefined) await raiseSqlState(tx, fault);
          // The COMMIT runs to its end, in the same write as this: a
          // statement_timeout during the wait for a synchronous standby
          // cancels the wait, and PostgreSQL then reports success for a
          // commit the standby may not have; transaction_timeout would end
          // the session after the local commit (docs/adr/0002-scale-out.md).
          tails.push(
            settle(
              tx`select set_config('statement_timeout', '0', true),
                        set_config('transaction_timeout', '0', true)`.execute(),
            ),
          );
          return outcome.value;
        })) as T;
        // The transaction is over: a statement a detached task starts later
        // must fail, not run in whatever transaction the connection serves
        // next.
        life.ended = COMMITTED;
        // Sent ahead of the COMMIT: one that failed aborted the transaction,
        // and PostgreSQL answered the COMMIT with a rollback.
        for (const tail of await Promise.all(tails)) if (!tail.ok) throw tail.error;
        return value;
      } catch (err) {
        // postgres.js settles begin() as soon as the connection closes, even
        // while fn still runs: mark the transaction ended so fn's next query
        // fails at once, and never run fn again beside its own live twin.
        life.ended = err;
        if (!progress.fnSettled) throw err;
        if (attempt > this.options.retryMax || !isRetryable(err)) throw err;
        this.options.onRetry?.({
          attempt,
          code: (err as { code: string }).code,
          name: options.name,
        });
        const base = this.options.backoffBaseMs ?? 5;
        await sleep(Math.random() * base * 2 ** (attempt - 1));
      }
    }
  }
}

/** What `life.ended` holds once a transaction committed. */
const COMMITTED = new Error('the unit of work committed');

type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

async function settle<T>(p: PromiseLike<T>): Promise<Settled<T>> {
  try {
    return { ok: true, value: await p };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * A promise that never settles, for a transaction callback whose connection
 * is gone. postgres.js rejects begin() as soon as the connection closes but
 * keeps the callback's scope alive; when the callback settles it sends COMMIT
 * or ROLLBACK on the dead connection, which throws outside any promise and
 * crashes the process. Never settling ends that chain; nothing references
 * it any more, so it is collected.
 */
function abandon<T>(): Promise<T> {
  return new Promise<T>(() => undefined);
}

async function raiseSqlState(tx: TransactionSql, sqlstate: string): Promise<void> {
  await tx`select set_config('fault.sqlstate', ${sqlstate}, true)`;
  await tx`do $$ begin raise exception 'injected fault' using errcode = current_setting('fault.sqlstate'); end $$`;
}
