import { AsyncLocalStorage } from 'node:async_hooks';
import {
  claimKeyedTransaction,
  isRetryable,
  decidedOf,
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
  private readonly storage = new AsyncLocalStorage<{ tx: TxState; attempt: number }>();
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
      const mark = outer.tx.undo.length;
      const undoSince = (): void => {
        for (const undo of outer.tx.undo.splice(mark).reverse()) undo();
      };
      let verdict: Verdict<T>;
      try {
        verdict = await fn();
      } catch (err) {
        undoSince();
        throw err;
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
      try {
        verdict = await this.storage.run({ tx, attempt }, fn);
      } catch (err) {
        rollBack();
        if (attempt > this.options.retryMax || !isRetryable(err)) throw err;
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
