/**
 * The boundary of a keyed request's transaction. A keyed attempt (the HTTP
 * idempotency plugin) runs inside {@link withinKeyedTransaction}; the first
 * transaction a unit of work opens there is the key's, and every unit of
 * work and database handle asks {@link claimKeyedTransaction} or
 * {@link refuseOutsideKeyedTransaction} before it would open another
 * transaction or send a statement through its pool. Such a write would
 * commit on its own, whatever happens to the key's transaction, and a
 * repeat of the key would make its effect again: it is refused before it is
 * sent, and the refusal is kept so the attempt fails even when the handler
 * catches it.
 *
 * The check is a lookup in AsyncLocalStorage where a transaction would be
 * opened or a pool statement made: no statement and no round trip, so it
 * runs in production as in tests.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Thrown where a keyed request's handler would write outside the key's
 * transaction: a unit of work over another pool, another transaction of its
 * own, or a statement through a pool. Not retryable; the keyed request
 * fails with a 500 and nothing is stored.
 */
export class TransactionEscapeError extends Error {
  override readonly name = 'TransactionEscapeError';
  /** Stable, for logs and tests. */
  readonly code = 'TRANSACTION_ESCAPE';
  /** @param what the operation that would have left the key's transaction. */
  constructor(what: string) {
    super(
      `${what} inside a keyed request, outside its key's transaction: its effect would commit without the key; write through the unit of work given to the idempotency plugin`,
    );
  }
}

interface KeyedScope {
  /** False once the attempt has settled: work it left behind is not its own. */
  active: boolean;
  /** Whether the key's transaction has been opened. */
  claimed: boolean;
  /** The first refusal, kept for the attempt. */
  refused: TransactionEscapeError | undefined;
}

const storage = new AsyncLocalStorage<KeyedScope>();

function refuse(scope: KeyedScope, what: string): never {
  const err = new TransactionEscapeError(what);
  scope.refused ??= err;
  throw err;
}

/**
 * Runs a keyed attempt: inside `fn`, the first transaction a unit of work
 * opens is the key's, and any other transaction or pool statement is
 * refused with {@link TransactionEscapeError}.
 *
 * @param fn the attempt (its unit of work, retries included).
 * @returns what `fn` resolved with.
 * @throws what `fn` threw.
 */
export async function withinKeyedTransaction<T>(fn: () => Promise<T>): Promise<T> {
  const scope: KeyedScope = { active: true, claimed: false, refused: undefined };
  try {
    return await storage.run(scope, fn);
  } finally {
    // Timers and callbacks the handler left behind keep this scope: once
    // the attempt is over they belong to nobody's key.
    scope.active = false;
  }
}

/**
 * Called by a unit of work as it opens an outermost transaction. Inside a
 * keyed attempt the first one is the key's; any other is refused.
 *
 * @param what the operation, for the error message.
 * @throws TransactionEscapeError for a second transaction in a keyed attempt.
 */
export function claimKeyedTransaction(what: string): void {
  const scope = storage.getStore();
  if (scope === undefined || !scope.active) return;
  if (scope.claimed) refuse(scope, what);
  scope.claimed = true;
}

/**
 * Called by a database handle before it sends a statement through its pool
 * (outside any transaction of its own): inside a keyed attempt that is
 * outside the key's transaction, and refused.
 *
 * @param what the operation, for the error message.
 * @throws TransactionEscapeError inside a keyed attempt.
 */
export function refuseOutsideKeyedTransaction(what: string): void {
  const scope = storage.getStore();
  if (scope !== undefined && scope.active) refuse(scope, what);
}

/**
 * What the current keyed attempt refused so far, so it fails even when the
 * handler caught the refusal.
 *
 * @returns the first refusal, or undefined (also outside a keyed attempt).
 */
export function keyedTransactionRefusal(): TransactionEscapeError | undefined {
  return storage.getStore()?.refused;
}
