/**
 * One keyed request inside the unit of work, as a function that returns a
 * decision: take the key (one statement, the handler's savepoint sent with
 * it), run the handler in the savepoint, store its final answer and commit;
 * or answer from the row a first request left; or roll back and store
 * nothing. The unit of work retries the whole attempt on serialization
 * failures, deadlocks and lock timeouts. No bytes are sent here: the caller
 * sends after the decision, so after the commit.
 *
 * Plain TypeScript over the kernel ports: testable without Fastify.
 */
import { performance } from 'node:perf_hooks';
import { isUuid, type Id } from '../../../kernel/ids/index.js';
import {
  isRequestInProgress,
  oneTimeSecretMarked,
  type IdempotencyEntry,
  type IdempotencyRequest,
  type IdempotencyStore,
} from '../../../kernel/idempotency/index.js';
import {
  isRetryable,
  keyedTransactionRefusal,
  withinKeyedTransaction,
  type UnitOfWork,
  type Verdict,
} from '../../../kernel/txn/index.js';
import { isSuccess, type Captured } from './capture.js';
import { FST_IDEMPOTENCY_AMBIENT_TRANSACTION } from './errors.js';
import type { Attributes } from '@opentelemetry/api';
import { activeContext, ATTRIBUTES, inSpan, SPANS, startSpan } from './tracing.js';

/** Final problems: stored (after rolling back to the savepoint) like a 2xx. */
export const FINAL_PROBLEMS: ReadonlySet<number> = new Set([
  400, 403, 404, 409, 410, 412, 413, 415, 422,
]);

/** How an attempt ended. */
export type Decision =
  /** Committed: the effect and the stored answer. Send it. */
  | {
      readonly kind: 'stored';
      readonly answer: Captured;
      readonly resourceId: Id | null;
    }
  /** A row for the key exists (a first request committed): answer from it. */
  | { readonly kind: 'existing'; readonly entry: IdempotencyEntry }
  /** Rolled back, nothing stored (401, 428, 429, 5xx, ...): send it, the key stays free. */
  | { readonly kind: 'not_stored'; readonly answer: Captured }
  /** The first request still holds the key and the wait ran out. */
  | { readonly kind: 'in_progress' }
  /** The answer was stored, and the COMMIT failed or its answer was lost: see the error. */
  | { readonly kind: 'commit_failed'; readonly error: unknown }
  /** The attempt failed before an answer (the database, a bug): nothing stored. */
  | { readonly kind: 'failed'; readonly error: unknown };

/** What one attempt needs. */
export interface AttemptInput {
  readonly store: IdempotencyStore;
  readonly transaction: UnitOfWork;
  /** The key and fingerprint, without the time (stamped per attempt). */
  readonly request: Omit<IdempotencyRequest, 'now'>;
  readonly now: () => Date;
  /** The route declares that its 2xx answers carry a one-time secret. */
  readonly oneTimeSecret: boolean;
  /** Called at the start of every attempt, retries included: reset the reply and the body. */
  readonly prepare: () => void;
  /**
   * Runs the handler (its validation result first) and captures its answer;
   * it throws only what the unit of work must retry, or a bug.
   */
  readonly invoke: () => Promise<Captured>;
  /** Called once per attempt with the time spent taking the key, waits included. */
  readonly onKeyWait: (seconds: number) => void;
}

/** What the handler's savepoint ended with. */
type Handled =
  | { readonly kind: 'answer'; readonly answer: Captured }
  /** The key's insert met a row: the handler never started. */
  | { readonly kind: 'not_taken' };

type Settled<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: unknown };

function settle<T>(promise: Promise<T>): Promise<Settled<T>> {
  return promise.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

/**
 * The top-level `id` of a JSON body when it is a UUID (lower case): the
 * stored `resource_id`, from which `Location` is rebuilt on replay.
 *
 * @param body the answer's JSON value.
 * @returns the id, or null.
 */
export function resourceIdOf(body: unknown): Id | null {
  if (typeof body !== 'object' || body === null) return null;
  const id = (body as Record<string, unknown>)['id'];
  return typeof id === 'string' && isUuid(id) ? (id.toLowerCase() as Id) : null;
}

/**
 * Runs a keyed request's attempts and decides how it ended. Inside them the
 * only transaction a unit of work may open is the key's: a handler's write
 * through another pool or unit of work is refused before it is sent
 * (kernel/txn, `withinKeyedTransaction`), and the attempt then fails with
 * nothing stored.
 *
 * @param input the store, the unit of work, the key, the handler's call.
 * @param name the unit of work's name (the route's operationId).
 * @returns the decision; never throws.
 */
export function runAttempt(input: AttemptInput, name: string): Promise<Decision> {
  return withinKeyedTransaction(() => attemptInTransaction(input, name));
}

async function attemptInTransaction(input: AttemptInput, name: string): Promise<Decision> {
  // Joined to a transaction the application opened, the key row would
  // commit (or not) with it, after this answer was sent.
  if (input.transaction.inTransaction()) {
    return { kind: 'failed', error: new FST_IDEMPOTENCY_AMBIENT_TRANSACTION(name) };
  }
  let number = 0;
  // The request's span: the COMMIT's span is its child, begun inside the
  // attempt that decided to keep.
  const parent = activeContext();
  let commit: ((attributes: Attributes, failed?: unknown) => void) | undefined;
  try {
    const decided = await input.transaction.decide(
      () => {
        number += 1;
        return tracedAttempt(input, number, () => {
          commit = startSpan(SPANS.commit, parent);
        });
      },
      {
        name,
        // A retry after the attempt decided to keep: its COMMIT (or a
        // statement sent with it) failed, and the span says with what.
        onRetry: (error) => {
          commit?.({ [ATTRIBUTES.commitResult]: 'retryable' }, error);
          commit = undefined;
        },
      },
    );
    if (decided.kind === 'commit_failed') {
      commit?.({ [ATTRIBUTES.commitResult]: 'failed' }, decided.error);
    } else {
      commit?.({ [ATTRIBUTES.commitResult]: 'committed' });
    }
    // The answer was stored and the COMMIT failed, or its answer was lost.
    if (decided.kind === 'commit_failed') return { kind: 'commit_failed', error: decided.error };
    return decided.value;
  } catch (error) {
    commit?.({ [ATTRIBUTES.commitResult]: 'failed' }, error);
    if (isRequestInProgress(error)) return { kind: 'in_progress' };
    return { kind: 'failed', error };
  }
}

/**
 * One attempt in its `idempotency.attempt` span: its number, and how it
 * ended (`stored`, `not_stored`, `existing`; `retryable` with the SQLSTATE
 * when the unit of work may run it again, `in_progress` when the first
 * request held the key past the lock timeout, else `failed`).
 */
function tracedAttempt(
  input: AttemptInput,
  number: number,
  onKept: () => void,
): Promise<Verdict<Decision>> {
  return inSpan(SPANS.attempt, { [ATTRIBUTES.attemptNumber]: number }, async (span) => {
    try {
      const verdict = await oneAttempt(input);
      const { kind } = verdict.value;
      span.setAttribute(ATTRIBUTES.attemptResult, kind);
      if (verdict.keep) onKept();
      return verdict;
    } catch (err) {
      span.setAttribute(
        ATTRIBUTES.attemptResult,
        isRetryable(err) ? 'retryable' : isRequestInProgress(err) ? 'in_progress' : 'failed',
      );
      throw err;
    }
  });
}

/** Reports the time spent taking the key once per attempt, whichever way it ended. */
function keyWaitReporter(onKeyWait: (seconds: number) => void): () => void {
  const started = performance.now();
  let reported = false;
  return () => {
    if (reported) return;
    reported = true;
    onKeyWait((performance.now() - started) / 1000);
  };
}

/**
 * One run of the attempt in the key's transaction (the unit of work runs it
 * again on a retry): take the key, run the handler in a savepoint, and say
 * whether to commit. Commits only a final answer, with its row completed.
 */
async function oneAttempt(input: AttemptInput): Promise<Verdict<Decision>> {
  input.prepare();
  const keyed: IdempotencyRequest = { ...input.request, now: input.now() };
  const keyWaited = keyWaitReporter(input.onKeyWait);
  // The handler runs in a savepoint, so a final answer other than a 2xx
  // rolls back its effects and keeps the key row. The key's insert is sent
  // first and the savepoint goes with it in one round trip.
  const taking = settle(input.store.take(keyed));
  let handled: Handled;
  try {
    handled = await handlerInSavepoint(input, taking, keyWaited);
  } catch (err) {
    // The insert failed (in progress, connection lost): the savepoint
    // failed with the aborted transaction; the insert's error is the cause.
    await throwIfNotTaken(taking, keyWaited);
    throw err;
  }
  if (handled.kind === 'not_taken') {
    await throwIfNotTaken(taking, keyWaited);
    // A row exists for the key (a first request committed, or it
    // expired): begin does the full work.
    let existing: IdempotencyEntry | null;
    try {
      existing = await input.store.begin(keyed);
    } finally {
      keyWaited();
    }
    if (existing !== null) return { keep: false, value: { kind: 'existing', entry: existing } };
    handled = await handlerInSavepoint(input, null, keyWaited);
  }
  if (handled.kind !== 'answer') throw new Error('the key was not taken after begin');
  return storedOrNot(input, keyed, handled.answer);
}

/** Throws the key's insert's error if it failed (the key wait then ended). */
async function throwIfNotTaken(
  taking: Promise<Settled<boolean>>,
  keyWaited: () => void,
): Promise<void> {
  const took = await taking;
  if (took.ok) return;
  keyWaited();
  throw took.error;
}

/**
 * Runs the handler in a savepoint of the key's transaction, after the key's
 * insert when one is in flight; keeps its writes only for a 2xx.
 */
async function handlerInSavepoint(
  input: AttemptInput,
  taking: Promise<Settled<boolean>> | null,
  keyWaited: () => void,
): Promise<Handled> {
  const decided = await input.transaction.decide<Handled>(
    async () => {
      if (taking !== null) {
        const took = await taking;
        if (!took.ok || !took.value) return { keep: false, value: { kind: 'not_taken' } };
        keyWaited();
      }
      const answer = await input.invoke();
      // A write the handler sent outside the key's transaction was refused
      // (kernel/txn): fail even if the handler caught it, since its answer
      // may claim an effect that never happened.
      const refused = keyedTransactionRefusal();
      if (refused !== undefined) throw refused;
      return { keep: isSuccess(answer), value: { kind: 'answer', answer } };
    },
    { nested: true },
  );
  return decided.value;
}

/**
 * A final answer is stored, its row completed with the COMMIT, and kept;
 * any other (401, 428, 429, 5xx, ...) is rolled back with the key row.
 */
async function storedOrNot(
  input: AttemptInput,
  keyed: IdempotencyRequest,
  answer: Captured,
): Promise<Verdict<Decision>> {
  const success = isSuccess(answer);
  const final = FINAL_PROBLEMS.has(answer.status) && answer.code !== 'request_in_progress';
  if (!success && !final) return { keep: false, value: { kind: 'not_stored', answer } };
  const secret = success && (input.oneTimeSecret || oneTimeSecretMarked());
  const resourceId = success ? resourceIdOf(answer.body) : null;
  await input.store.completeAtCommit(keyed, {
    status: answer.status,
    body: secret ? { one_time_secret: true } : answer.body,
    resourceId,
  });
  return { keep: true, value: { kind: 'stored', answer, resourceId } };
}
