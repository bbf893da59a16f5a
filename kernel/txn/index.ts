/**
 * The unit of work port: a use case runs its database work inside
 * `uow.run(fn)` and every adapter it calls joins the same transaction without
 * being handed it. The adapter side (platform/pg) holds the transaction in
 * AsyncLocalStorage; this port only names the contract and its errors.
 *
 * @packageDocumentation
 */

export {
  claimKeyedTransaction,
  keyedTransactionRefusal,
  refuseOutsideKeyedTransaction,
  TransactionEscapeError,
  withinKeyedTransaction,
} from './boundary.js';

/** Options of {@link UnitOfWork.run}. */
export interface UnitOfWorkOptions {
  /**
   * When joining an outer unit of work, run inside a savepoint: an error
   * thrown by `fn` rolls back only what `fn` did, and is rethrown. Without it a
   * nested run simply joins the outer transaction.
   */
  readonly nested?: boolean;
  /** A short name for logs and metrics, e.g. the use case. */
  readonly name?: string;
  /**
   * Called by the outermost run just before it runs `fn` again, with the
   * retryable error that ended the attempt (raised by a statement of `fn`
   * or by the COMMIT) and that attempt's number (1 for the first). Ignored
   * by a joined run, which never retries on its own. It must not throw.
   */
  readonly onRetry?: (error: unknown, attempt: number) => void;
}

/**
 * Runs functions inside one database transaction.
 *
 * The outermost `run` opens a READ COMMITTED transaction with the configured
 * lock, statement and transaction timeouts, commits when `fn` resolves and
 * rolls back when it rejects. It runs `fn` again, from the start, when the
 * database reports a serialization failure (40001), a deadlock (40P01) or a
 * lock timeout (55P03), up to the configured number of retries, unless the
 * error is marked with {@link markNonRetryable}. So `fn` must have no effect
 * outside the transaction other than through jobs added inside it.
 */
export interface UnitOfWork {
  /**
   * Runs `fn` in the ambient transaction, opening one if there is none.
   *
   * @param fn the work; may be called more than once (retries).
   * @param options nesting and naming.
   * @returns what `fn` resolved with, after the commit when this is the
   *   outermost run.
   * @throws what `fn` threw (after rollback), or the commit's error.
   */
  run<T>(fn: () => Promise<T>, options?: UnitOfWorkOptions): Promise<T>;
  /**
   * Runs `fn` as {@link run} does, and lets it say, with the value it
   * resolves with, whether its writes are kept: `keep: false` rolls back
   * (to the savepoint when nested), with no retry, and hands the value
   * back as `discarded`. A commit that fails after `fn` said keep (and
   * after the retries) is `commit_failed`, with the value `fn` meant to
   * keep and the error: the caller tells "nothing was decided" (a
   * rejection) from "the decision did not commit" without state of its own.
   * Joined to an outer unit of work it always runs in a savepoint, with or
   * without `nested`: a discard that left its writes in the outer
   * transaction would be reported as rolled back and then commit. A
   * transaction's savepoints run one after the other: a second nested run
   * of a scope while one is open, or a statement of the scope that opened
   * it, is refused ({@link OverlappingSavepointError}); so is a nested run
   * started from a savepoint whose run is over. What must be sent with the
   * COMMIT (the idempotency store's completion) belongs to the outermost
   * run, never to a joined `decide`.
   *
   * @param fn the work; may be called more than once (retries).
   * @param options nesting and naming.
   * @returns how the work ended, with `fn`'s value.
   * @throws what `fn` threw (after rollback), or what opening the
   *   transaction threw.
   */
  decide<T>(fn: () => Promise<Verdict<T>>, options?: UnitOfWorkOptions): Promise<Decided<T>>;
  /** Whether the caller is inside a unit of work. */
  inTransaction(): boolean;
}

/** What a function run by {@link UnitOfWork.decide} resolves with: its value, and whether to keep its writes. */
export interface Verdict<T> {
  readonly keep: boolean;
  readonly value: T;
}

/** How {@link UnitOfWork.decide} ended, with the value of the function's last run. */
export type Decided<T> =
  /** Kept: committed (outermost) or released into the outer transaction (nested). */
  | { readonly kind: 'kept'; readonly value: T }
  /** The function said not to keep its writes: rolled back. */
  | { readonly kind: 'discarded'; readonly value: T }
  /** The function said keep and the commit failed (or its answer was lost): see the error. */
  | { readonly kind: 'commit_failed'; readonly value: T; readonly error: unknown };

/**
 * How a run that did not commit by itself ended (one joined to an outer
 * transaction, or a savepoint released or rolled back), for implementations.
 *
 * @param verdict what the function resolved with.
 * @returns `kept` or `discarded`, with its value.
 */
export function decidedOf<T>(verdict: Verdict<T>): Decided<T> {
  return { kind: verdict.keep ? 'kept' : 'discarded', value: verdict.value };
}

/**
 * A unit of work that implements one loop, {@link DecidingUnitOfWork.perform},
 * and gets `run` and `decide` written over it: `run`'s work is always kept
 * and a failed commit rejects with its error; `decide` always asks for a
 * savepoint when joined, so that its `keep: false` has something to roll
 * back.
 */
export abstract class DecidingUnitOfWork implements UnitOfWork {
  /**
   * The adapter's loop: runs `fn` in the ambient transaction or a new one,
   * in a savepoint when joined with `options.nested`, and ends as
   * {@link UnitOfWork.decide} describes.
   *
   * @param fn the work and its verdict; may be called more than once.
   * @param options nesting and naming, as the caller meant them.
   * @returns how the work ended, with `fn`'s value.
   * @throws what `fn` threw (after rollback), or what opening the
   *   transaction threw.
   */
  protected abstract perform<T>(
    fn: () => Promise<Verdict<T>>,
    options: UnitOfWorkOptions,
  ): Promise<Decided<T>>;

  /** @inheritdoc */
  abstract inTransaction(): boolean;

  /** @inheritdoc */
  decide<T>(fn: () => Promise<Verdict<T>>, options: UnitOfWorkOptions = {}): Promise<Decided<T>> {
    return this.perform(fn, { ...options, nested: true });
  }

  /** @inheritdoc */
  async run<T>(fn: () => Promise<T>, options: UnitOfWorkOptions = {}): Promise<T> {
    const decided = await this.perform(async () => ({ keep: true, value: await fn() }), options);
    if (decided.kind === 'commit_failed') throw decided.error;
    return decided.value;
  }
}

/** SQLSTATEs on which the outermost unit of work retries the whole function. */
export const RETRYABLE_SQLSTATES: ReadonlySet<string> = new Set(['40001', '40P01', '55P03']);

const NON_RETRYABLE = Symbol.for('kernel.txn.nonRetryable');

/**
 * Marks an error so the unit of work lets it through without a retry, even
 * when it carries a retryable SQLSTATE (e.g. a lock timeout that means "the
 * first request still holds this key" rather than "try again").
 *
 * @param err the error to mark.
 * @returns the same error.
 */
export function markNonRetryable<E extends object>(err: E): E {
  Object.defineProperty(err, NON_RETRYABLE, { value: true, enumerable: false });
  return err;
}

/**
 * Whether the unit of work should run the function again after this error.
 *
 * @param err anything thrown.
 * @returns true for a retryable SQLSTATE on an unmarked error.
 */
export function isRetryable(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  if ((err as Record<symbol, unknown>)[NON_RETRYABLE] === true) return false;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && RETRYABLE_SQLSTATES.has(code);
}

/**
 * Thrown when a transaction's work would overlap a savepoint: a second
 * nested run of one scope while another is open, or a statement of the
 * scope that opened a savepoint while it is open. Either would run inside
 * the open savepoint, and its rollback would take writes reported kept
 * (docs/DECISIONS.md, "A unit of work rolls back with a value, and says
 * when its commit failed").
 */
export class OverlappingSavepointError extends Error {
  override readonly name = 'OverlappingSavepointError';
  /** @param what what overlapped: `a nested unit of work` or `a statement`. */
  constructor(what: string) {
    super(
      `${what} while a savepoint of the same transaction is open: a transaction's work runs one step after the other; await the nested unit of work first`,
    );
  }
}

/** Thrown when an adapter that needs the ambient transaction is called outside a unit of work. */
export class TransactionRequiredError extends Error {
  override readonly name = 'TransactionRequiredError';
  /** @param what the operation that needs a transaction. */
  constructor(what: string) {
    super(`${what} must run inside a unit of work`);
  }
}

/**
 * Thrown when code inside a unit of work asks for a pool connection: a second
 * connection per request can deadlock the pool against waiting duplicates.
 */
export class PoolInsideTransactionError extends Error {
  override readonly name = 'PoolInsideTransactionError';
  /** @param what the operation that asked for the pool. */
  constructor(what: string) {
    super(`${what} asked for a pool connection inside a unit of work; use the ambient transaction`);
  }
}
