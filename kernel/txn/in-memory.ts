import { AsyncLocalStorage } from 'node:async_hooks';
import {
  claimKeyedTransaction,
  isRetryable,
  decidedOf,
  OverlappingSavepointError,
  DecidingUnitOfWork,
  TransactionRequiredError,
  type Decided,
  type UnitOfWorkOptions,
  type Verdict,
} from './index.js';

/**
 * One in-memory transaction: an undo log, and a promise that settles when it
 * commits or rolls back (what a concurrent writer of the same row waits on).
 */
export interface InMemoryTransaction {
  /** Distinguishes transactions, for stores that record who wrote what. */
  readonly id: number;
  /** Registers how to undo a write if the transaction (or savepoint) rolls back. */
  onRollback(undo: () => void): void;
  /** Resolves with true on commit, false on rollback. */
  readonly ended: Promise<boolean>;
  /** Whether it has ended. */
  isOpen(): boolean;
  /**
   * Makes the commit fail with `err` (rolling everything back), as a failing
   * statement sent with PostgreSQL's COMMIT does.
   */
  failAtCommit(err: Error): void;
}

interface TxState extends InMemoryTransaction {
  readonly undo: (() => void)[];
  /** The first failure registered with failAtCommit. */
  commitFailure(): Error | undefined;
  end(committed: boolean): void;
}

/** One scope of a transaction: the transaction itself, or a savepoint in it. */
interface Frame {
  readonly tx: TxState;
  readonly attempt: number;
  readonly scope: Scope;
}

/**
 * As the PostgreSQL scopes: a savepoint of this scope runs; this one's run
 * is over; the scope it was opened from.
 */
interface Scope {
  savepointOpen: boolean;
  ended: boolean;
  readonly parent: Scope | undefined;
}

/** Whether a scope's run, or that of a scope it was opened from, is over. */
function over(scope: Scope): boolean {
  for (let s: Scope | undefined = scope; s !== undefined; s = s.parent) if (s.ended) return true;
  return false;
}

/** Whether fn's value is a verdict; a JavaScript caller may resolve with anything. */
function verdictOf<T>(value: Verdict<T>): Verdict<T> {
  if (typeof value !== 'object' || typeof (value as { keep?: unknown }).keep !== 'boolean') {
    throw new TypeError('decide: fn must resolve with { keep, value }');
  }
  return value;
}

/** A scope that refuses writes once its run, or an outer one, is over, or while a savepoint of it runs. */
function checkScope(scope: Scope, tx: TxState): void {
  if (!tx.isOpen()) throw new Error('the transaction is over');
  if (over(scope)) throw new Error("the savepoint's run is over");
  if (scope.savepointOpen) throw new OverlappingSavepointError('a write');
}

/** Options of {@link InMemoryUnitOfWork}. */
export interface InMemoryUnitOfWorkOptions {
  /** Retries after the first attempt. */
  readonly retryMax: number;
  /** Test hook: an error to throw before the commit of a given attempt. */
  readonly faultHook?: (ctx: { attempt: number }) => Error | undefined;
  /** Test hook: an error to throw instead of committing (a failing COMMIT). */
  readonly commitHook?: (ctx: { attempt: number }) => Error | undefined;
}

/**
 * A {@link UnitOfWork} for fast unit tests of code that depends on the port:
 * writes made through stores that register undo actions are rolled back on
 * error, savepoints roll back only their own writes, and retryable errors run
 * the function again, as the PostgreSQL implementation does.
 */
export class InMemoryUnitOfWork extends DecidingUnitOfWork {
  private readonly storage = new AsyncLocalStorage<Frame>();
  private nextId = 1;

  /** @param options retries and test hooks. */
  constructor(private readonly options: InMemoryUnitOfWorkOptions = { retryMax: 3 }) {
    super();
  }

  /** @inheritdoc */
  inTransaction(): boolean {
    return this.storage.getStore() !== undefined;
  }

  /**
   * The ambient transaction, for in-memory stores.
   *
   * @param what the operation, for the error message.
   * @returns the transaction.
   * @throws TransactionRequiredError outside a unit of work.
   */
  current(what: string): InMemoryTransaction {
    const frame = this.storage.getStore();
    if (!frame) throw new TransactionRequiredError(what);
    // As the PostgreSQL unit of work refuses a statement: a write of a
    // scope that is over, or while a savepoint of it runs, would be kept or
    // undone with the wrong verdict.
    checkScope(frame.scope, frame.tx);
    return frame.tx;
  }

  /** @inheritdoc */
  protected async perform<T>(
    fn: () => Promise<Verdict<T>>,
    options: UnitOfWorkOptions,
  ): Promise<Decided<T>> {
    const outer = this.storage.getStore();
    if (outer) {
      if (options.nested !== true) return decidedOf(await fn());
      // As the PostgreSQL unit of work: one savepoint of a scope at a time,
      // and none from a savepoint whose run is over.
      if (over(outer.scope)) throw new Error("the savepoint's run is over");
      if (outer.scope.savepointOpen) throw new OverlappingSavepointError('a nested unit of work');
      const mark = outer.tx.undo.length;
      // An outer scope that is over gave its verdict over this savepoint's
      // writes already (and one still running when it did fails, undoing
      // them): nothing is left here to undo.
      const undoSince = (): void => {
        if (over(outer.scope)) return;
        for (const undo of outer.tx.undo.splice(mark).reverse()) undo();
      };
      const scope: Scope = { savepointOpen: false, ended: false, parent: outer.scope };
      outer.scope.savepointOpen = true;
      let verdict: Verdict<T>;
      try {
        verdict = verdictOf(
          await Promise.resolve().then(() => this.storage.run({ ...outer, scope }, fn)),
        );
        // A savepoint opened inside this run and still running outlived it.
        if (scope.savepointOpen)
          throw new OverlappingSavepointError('a nested unit of work still running');
      } catch (err) {
        scope.ended = true;
        outer.scope.savepointOpen = false;
        undoSince();
        throw err;
      } finally {
        scope.ended = true;
        outer.scope.savepointOpen = false;
      }
      if (!verdict.keep) undoSince();
      return decidedOf(verdict);
    }
    // As the PostgreSQL unit of work: inside a keyed request only the key's
    // own transaction may be opened.
    claimKeyedTransaction('a unit of work opening a transaction');
    for (let attempt = 1; ; attempt++) {
      const tx = this.newTransaction();
      const rollBack = (): void => {
        for (const undo of tx.undo.splice(0).reverse()) undo();
        tx.end(false);
      };
      let verdict: Verdict<T>;
      const scope: Scope = { savepointOpen: false, ended: false, parent: undefined };
      try {
        verdict = verdictOf(
          await Promise.resolve().then(() => this.storage.run({ tx, attempt, scope }, fn)),
        );
        // A savepoint still running when fn settled outlived it.
        if (scope.savepointOpen)
          throw new OverlappingSavepointError('a nested unit of work still running');
      } catch (err) {
        rollBack();
        if (attempt > this.options.retryMax || !isRetryable(err)) throw err;
        options.onRetry?.(err, attempt);
        continue;
      }
      if (!verdict.keep) {
        rollBack();
        return { kind: 'discarded', value: verdict.value };
      }
      const failure =
        this.options.faultHook?.({ attempt }) ??
        this.options.commitHook?.({ attempt }) ??
        tx.commitFailure();
      if (failure === undefined) {
        tx.end(true);
        return { kind: 'kept', value: verdict.value };
      }
      rollBack();
      if (attempt > this.options.retryMax || !isRetryable(failure)) {
        return { kind: 'commit_failed', value: verdict.value, error: failure };
      }
      options.onRetry?.(failure, attempt);
    }
  }

  private newTransaction(): TxState {
    const { promise: ended, resolve } = Promise.withResolvers<boolean>();
    let open = true;
    let failure: Error | undefined;
    const undo: (() => void)[] = [];
    return {
      failAtCommit: (err) => {
        failure ??= err;
      },
      commitFailure: () => failure,
      id: this.nextId++,
      undo,
      ended,
      isOpen: () => open,
      onRollback: (u) => undo.push(u),
      end: (committed) => {
        open = false;
        resolve(committed);
      },
    };
  }
}
