/**
 * The idempotency port: what the HTTP plugin (platform/http) needs from a key
 * store, and the one-time-secret marker handlers set. Plain TypeScript:
 * kernel and node built-ins only. Module sync implements the store over
 * PostgreSQL; an in-memory store serves the plugin's fast unit tests.
 *
 * @packageDocumentation
 */
import { currentContext, requireContext } from '../context/index.js';
import type { Id } from '../ids/index.js';

/**
 * The first request under a key is still running: its transaction holds the
 * key row and the repeat's wait ended (lock timeout). The plugin answers
 * `409 request_in_progress` with `Retry-After`. Never retried by the unit of
 * work: waiting again would only hold a connection longer.
 */
export class RequestInProgressError extends Error {
  override readonly name = 'RequestInProgressError';
  /** @param options the underlying cause (the lock timeout), if any. */
  constructor(options?: { cause?: unknown }) {
    super('the first request under this idempotency key is still running', options);
  }
}

/**
 * @param err anything thrown.
 * @returns whether it is a {@link RequestInProgressError}.
 */
export function isRequestInProgress(err: unknown): err is RequestInProgressError {
  return err instanceof RequestInProgressError;
}

/** One keyed request, as the store sees it. */
export interface IdempotencyRequest {
  /** The authenticated principal: keys are scoped by it. */
  readonly principalId: Id;
  /** The key (a UUIDv7, normalised to lower case). */
  readonly key: Id;
  /** The route's operationId. */
  readonly action: string;
  /** SHA-256 of the request fingerprint, 32 bytes. */
  readonly sha256: Uint8Array;
  /** The kernel clock's time: `created_at`, and what "expired" is judged against. */
  readonly now: Date;
  /** Time to live of the key (`sync.idempotency_key_ttl`), in ms. */
  readonly ttlMs: number;
}

/** A final answer as stored: status, JSON body (or null) and the created resource's id. */
export interface StoredResponse {
  readonly status: number;
  readonly body: unknown;
  readonly resourceId: Id | null;
}

/** A stored row: its answer (when completed) and the fingerprint it was taken with. */
export interface IdempotencyEntry extends StoredResponse {
  readonly sha256: Uint8Array;
  readonly completed: boolean;
}

/** Where keys and their answers live. */
export interface IdempotencyStore {
  /**
   * The replay fast path, from memory only: the completed, unexpired row
   * for (principal, key) when this process knows it (it stored the answer,
   * or met the row before), else null. Never a database read: a fresh key,
   * the common case, pays nothing for the replay path, and a repeat that
   * memory cannot answer is decided by the attempt's insert
   * (01-idempotency.md, "Algorithm", step 1). Completed rows never change
   * until they expire, so what memory holds is sound.
   *
   * @param principalId the principal.
   * @param key the key.
   * @param now the kernel clock's time.
   * @returns the entry, or null when memory holds no completed unexpired row.
   */
  recall(principalId: Id, key: Id, now: Date): IdempotencyEntry | null;
  /**
   * The common case of taking a key, in one statement: inserts an
   * in-progress row when no row exists for (principal, key). Like `begin` it
   * waits for a concurrent uncommitted insert of the same key to end. Any
   * existing row, even an expired one, is left alone: the caller then calls
   * `begin`. An adapter sends its statement before returning the promise, so
   * the caller's next statement (the savepoint of the handler's nested run)
   * travels with it.
   *
   * @param req the request.
   * @returns true when the key was taken (this request runs); false when a
   *   row for the key exists.
   * @throws RequestInProgressError when the wait ends with the lock timeout.
   * @throws TransactionRequiredError outside a unit of work.
   */
  take(req: IdempotencyRequest): Promise<boolean>;
  /**
   * Takes the key inside the caller's unit of work: deletes the row if it has
   * expired, then inserts an in-progress row. Waits, at the primary key, for a
   * concurrent uncommitted insert of the same key to end.
   *
   * @param req the request.
   * @returns null when the key was taken (this request runs); otherwise the
   *   existing row (completed: replay or reuse; not completed: in progress).
   * @throws RequestInProgressError when the wait ends with the lock timeout.
   * @throws TransactionRequiredError outside a unit of work.
   */
  begin(req: IdempotencyRequest): Promise<IdempotencyEntry | null>;
  /**
   * Stores the final answer in the same transaction as `begin` (or `take`):
   * the row's update may travel with the transaction's COMMIT, so it takes
   * effect, or fails, at the commit; the call itself resolves at once. An
   * update that finds no key in progress fails the commit.
   *
   * @param req the request given to `begin`.
   * @param res the answer to store.
   * @throws TransactionRequiredError outside a unit of work.
   */
  completeAtCommit(req: IdempotencyRequest, res: StoredResponse): Promise<void>;
}

const ONE_TIME_SECRET = 'idempotency.one_time_secret';

/**
 * Marks the current request's answer as carrying a one-time secret, so the
 * idempotency plugin never stores it. For handlers whose answers carry a
 * secret only sometimes; routes whose 2xx answers always do declare
 * `config.oneTimeSecret` instead.
 *
 * @throws Error outside a request context.
 */
export function markOneTimeSecret(): void {
  requireContext().flags.add(ONE_TIME_SECRET);
}

/**
 * @returns whether the current request's answer was marked as carrying a one-time secret.
 */
export function oneTimeSecretMarked(): boolean {
  return currentContext()?.flags.has(ONE_TIME_SECRET) ?? false;
}

/**
 * Clears the marker: a retried attempt starts from scratch. A no-op outside a
 * request.
 */
export function clearOneTimeSecret(): void {
  currentContext()?.flags.delete(ONE_TIME_SECRET);
}
