/**
 * Statements watched on their way: a check before each one is created, its
 * error seen first by an observer, its result checked for the holes a
 * stale driver state leaves (see {@link IncompleteResultError}).
 */
import type { ISql } from './client.js';
import type { StatementSpans } from './statement-spans.js';

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
 * Thrown instead of a result that no CommandComplete answered. postgres.js
 * 3.4.9 keeps a statement made on a connection after its socket's error
 * (ECONNRESET) and before its close as the connection's current query, and
 * settles it with the next session's start-up answer: an empty result,
 * read as "no rows" (a wrong 401 for a valid token, a wrong 404). Every
 * statement we send is answered by a CommandComplete, which sets the
 * result's `command`; a result whose `command` is still null was never
 * answered. The caller gets a 503 to retry instead.
 */
export class UnansweredResultError extends Error {
  override readonly name = 'UnansweredResultError';
  /** Maps to 503, like a lost connection: the client may try again. */
  readonly code = 'RESULT_UNANSWERED';
  constructor() {
    super(
      'the database driver settled a statement that PostgreSQL never answered: its connection was lost as it was sent',
    );
  }
}

/**
 * Refuses a result with more rows than PostgreSQL counted (see
 * {@link IncompleteResultError}), or one PostgreSQL never answered (see
 * {@link UnansweredResultError}); a statement that returns no rows (an
 * UPDATE without RETURNING) has fewer, which is fine.
 *
 * @param value a query's result.
 * @returns the same value.
 * @throws IncompleteResultError for a result with holes.
 * @throws UnansweredResultError for a driver's result that PostgreSQL never
 *   answered (its `command` null; a plain array, the list of several
 *   statements' results, has none and passes).
 */
export function checkedResult<V>(value: V): V {
  if (Array.isArray(value)) {
    if (Object.hasOwn(value, 'command') && (value as { command?: unknown }).command === null) {
      throw new UnansweredResultError();
    }
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
/**
 * A bound on how long a statement of the pool may go unanswered: past it
 * the caller gets `stalled()`'s error and `onStall` sees the statement
 * (to end the session it was written to).
 */
export interface StatementDeadline {
  readonly ms: number;
  readonly stalled: () => Error;
  /** Sees the statement and when it was made. */
  readonly onStall: (query: unknown, madeAt: Date) => void;
}

function observe<Q>(
  query: Q,
  onError: (err: unknown) => void,
  deadline: StatementDeadline | undefined,
  before: () => void,
  spans: StatementSpans | undefined,
): Q {
  if (
    typeof query !== 'object' ||
    query === null ||
    typeof (query as { then?: unknown }).then !== 'function'
  ) {
    return query;
  }
  // postgres.js sends a statement only when it is first awaited or
  // executed, to whatever session its connection holds then: the check that
  // refuses it runs again at that moment, so a statement made in a
  // transaction and first awaited after it ended never runs outside it (or
  // in the next transaction on the same connection). One whose sending was
  // asked for earlier (executed, or awaited) goes out as asked, ahead of the
  // COMMIT or ROLLBACK that followed it.
  const lazy = query as unknown as {
    handle?: unknown;
    executed?: boolean;
    reject?: (err: unknown) => void;
  };
  const handle = lazy.handle;
  if (typeof handle === 'function' && typeof lazy.reject === 'function') {
    const reject = lazy.reject;
    let asked = false;
    lazy.handle = () => {
      if (!asked && lazy.executed !== true) {
        asked = true;
        try {
          before();
        } catch (err) {
          lazy.executed = true;
          reject(err);
          return Promise.resolve();
        }
        const strings = (query as { strings?: unknown }).strings;
        const text = Array.isArray(strings) && typeof strings[0] === 'string' ? strings[0] : '';
        spans?.sent(text, query as unknown as PromiseLike<unknown>);
      }
      return (handle as () => unknown).call(query);
    };
  }
  const pending = query as unknown as PromiseLike<unknown> & {
    then: PromiseLike<unknown>['then'];
  };
  const own = pending.then.bind(pending);
  const madeAt = deadline === undefined ? undefined : new Date();
  let raced: PromiseLike<unknown> | undefined;
  // One timer per statement, made when it is first awaited (then() may be
  // called more than once).
  const then: PromiseLike<unknown>['then'] =
    deadline === undefined
      ? own
      : (onFulfilled, onRejected) => {
          raced ??= new Promise<unknown>((resolve, reject) => {
            const timer = setTimeout(() => {
              deadline.onStall(query, madeAt ?? new Date());
              reject(deadline.stalled());
            }, deadline.ms);
            own(
              (v) => {
                clearTimeout(timer);
                resolve(v);
              },
              (err: unknown) => {
                clearTimeout(timer);
                reject(err instanceof Error ? err : new Error(String(err)));
              },
            );
          });
          return raced.then(onFulfilled, onRejected);
        };
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
 * error passed to `onError`. The methods named in `refused` throw when
 * called (a transaction's client must not end, reserve or nest the
 * connection under it); everything else (`json`, identifiers) passes
 * through.
 *
 * @param sql the client to watch.
 * @param before runs before each statement is made; may throw to refuse it.
 * @param onError sees each statement's error before its caller does.
 * @param refused methods that must not be called on this client.
 * @param deadline how long a statement may go unanswered, if bounded.
 * @param spans where each statement's span begins when it is sent, if
 *   statements are traced.
 * @returns the watched client.
 */
export function observed<S extends ISql>(
  sql: S,
  before: () => void,
  onError: (err: unknown) => void,
  refused: ReadonlySet<string> = NONE,
  deadline?: StatementDeadline,
  spans?: StatementSpans,
): S {
  return new Proxy(sql, {
    apply(target, thisArg, args: unknown[]) {
      // Only tagged templates run statements; sql(identifier) builds a fragment.
      const isTemplate =
        Array.isArray(args[0]) && Object.prototype.hasOwnProperty.call(args[0], 'raw');
      if (isTemplate) refusedNow(before, onError);
      const result: unknown = Reflect.apply(target, thisArg, args);
      return isTemplate ? observe(result, onError, deadline, before, spans) : result;
    },
    get(target, property, receiver) {
      if (typeof property === 'string' && refused.has(property)) {
        return () => {
          throw new Error(`${property}() is not available on a unit of work's transaction`);
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      if (property === 'unsafe' && typeof value === 'function') {
        return (...args: unknown[]) => {
          refusedNow(before, onError);
          return observe(
            (value as (...a: unknown[]) => unknown).apply(target, args),
            onError,
            deadline,
            before,
            spans,
          );
        };
      }
      return value;
    },
  });
}

const NONE: ReadonlySet<string> = new Set();

/**
 * Runs the check before a statement is made; a refusal is seen by
 * `onError` as a failed statement would be (so a scope that refused one
 * fails, even when its caller catches the refusal), then thrown.
 */
function refusedNow(before: () => void, onError: (err: unknown) => void): void {
  try {
    before();
  } catch (err) {
    onError(err);
    throw err;
  }
}
