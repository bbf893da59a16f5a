/**
 * What the outbox holds and takes: an intent and its answer, a new intent
 * as a caller states it, a final record, the options of opening; and the
 * one rule of a path an intent may have, which stating checks and reading
 * a row checks again.
 */
import canonicalize from 'canonicalize';

/** Where an intent stands. */
export type IntentState = 'pending' | 'done' | 'failed';

/**
 * Why a failed intent failed: `key_reuse` (the server answered `422
 * idempotency_key_reuse`: the key was used for another request, a bug of the
 * caller), `expired` (the key became older than the server keeps keys before
 * it could be sent; it was not sent again), `unexpected_answer` (an answer
 * the API does not give to such a request, e.g. 405 or 428),
 * `outcome_unknown` (a 2xx or an error the server would store, 400, 403,
 * 404, 409, 410, 412, 413, 415 or 422, but without `Idempotent-Replay`
 * twice in a row, so not the key's stored answer: a gateway's, or a
 * refusal before the key was looked up; or an answer the API never gives,
 * after an earlier attempt that may have reached the server; whether the
 * intent took effect is not known).
 */
export type FailureReason = 'key_reuse' | 'expired' | 'unexpected_answer' | 'outcome_unknown';

/** The HTTP methods of writes. */
export type WriteMethod = 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** An answer as the outbox keeps it: the status, a few headers and the body's exact text. */
export interface RecordedAnswer {
  /** The HTTP status. */
  readonly status: number;
  /** Whether the server sent `Idempotent-Replay: true` (the stored answer of an earlier attempt). */
  readonly replayed: boolean;
  /**
   * Whether the answer carried `Idempotent-Replay` (`true` or `false`): the
   * key's stored answer, given first or again. Without it the answer was
   * not stored under the key (docs/api/README.md, "Which answers are
   * stored"). Null: not known, for an answer recorded by a client of schema
   * version 1, which kept only whether it was a replay.
   */
  readonly marked: boolean | null;
  /** The headers kept, by lower-case name: location, etag, content-type, correlation-id. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body exactly as received (JSON text for every answer of this API). */
  readonly body: string;
}

/** One intended write and what became of it. */
export interface Intent {
  /** Its place in the outbox: intents are stated, and sent per lane, in this order. */
  readonly seq: number;
  /** Its Idempotency-Key, a lower-case UUIDv7, fixed when it was stated. */
  readonly key: string;
  /** What it does, e.g. the OpenAPI operationId `createTransfer`. */
  readonly operation: string;
  /** The HTTP method. */
  readonly method: WriteMethod;
  /** The request path from the origin, e.g. `/api/v1/transfers`. */
  readonly path: string;
  /** The request body exactly as sent (RFC 8785 JSON), or null for none. */
  readonly body: string | null;
  /** The lanes it is ordered in (see {@link NewIntent.lanes}). */
  readonly lanes: readonly string[];
  /** When it was stated, in milliseconds since the epoch (its key's age counts from here). */
  readonly createdAt: number;
  /** pending, done (a final answer), or failed (see {@link failure}). */
  readonly state: IntentState;
  /** Why it failed, for state `failed`; otherwise null. */
  readonly failure: FailureReason | null;
  /**
   * How many attempts were started so far: each is counted, durably, before
   * its first byte is sent, so one cut off by a crash, a kill or the
   * caller's abort is counted too (its bytes may have left).
   */
  readonly attempts: number;
  /** When a pending intent may be sent next, in milliseconds since the epoch. */
  readonly nextAttemptAt: number;
  /**
   * When the attempt in flight started, in milliseconds since the epoch:
   * recorded before its first byte is sent, cleared when it ends. On an
   * intent no process is sending, it names an attempt cut off (a crash, a
   * kill) that may have reached the server. Null when none is in flight.
   */
  readonly attemptStartedAt: number | null;
  /**
   * The server's time (its `Date`, carried forward on the monotonic clock)
   * seen before the intent's first attempt, in milliseconds since the
   * epoch: its key's age on the server's clock counts from here. Null when
   * no server time was known before an attempt (or the row predates
   * schema version 3).
   */
  readonly serverAnchor: number | null;
  /** What the last unsuccessful attempt met, e.g. `503 service_unavailable` or `ECONNREFUSED`. */
  readonly lastError: string | null;
  /**
   * Whether the last attempt's answer was unmarked: a 2xx or a status the
   * server stores, without `Idempotent-Replay`, so not known to be the
   * key's answer, and repeated once. A second unmarked answer in a row is
   * an unknown outcome. False for a new intent and after any other retry.
   */
  readonly unmarkedAnswer: boolean;
  /**
   * The shortest key lifetime known since just before the intent's first
   * attempt, in milliseconds (null before it): its key's row, if the
   * server kept one, expires no later than that after the server's first
   * sight of it, whatever longer lifetime the server tells later.
   */
  readonly keyLifetimeMs: number | null;
  /**
   * The final answer, for `done` and for `failed` with key_reuse,
   * unexpected_answer or outcome_unknown.
   */
  readonly answer: RecordedAnswer | null;
  /** When it reached its final state, in milliseconds since the epoch. */
  readonly finishedAt: number | null;
  /**
   * When the command that stated it printed its final result, in
   * milliseconds since the epoch (see {@link Outbox.markReported}). Null
   * while pending, and for a settled intent whose result no command printed
   * (its process was killed after the answer was recorded, or a library
   * caller settled it).
   */
  readonly reportedAt: number | null;
}

/** What a caller states to make an intent. */
export interface NewIntent {
  /** What it does, e.g. `createTransfer`. */
  readonly operation: string;
  /** The HTTP method. */
  readonly method: WriteMethod;
  /**
   * The path from the origin, starting with `/` but not `//`, without a
   * query (keyed requests take none) and without control characters.
   */
  readonly path: string;
  /** The JSON body, or undefined for none; it is kept and sent in its RFC 8785 form. */
  readonly body?: unknown;
  /**
   * The lanes it is ordered in: of the intents that share a lane, one is sent
   * at a time, in the order they were stated. An intent with no lanes is
   * independent of all others. Default: `['outbox']`, one order for
   * everything.
   */
  readonly lanes?: readonly string[];
  /**
   * Its Idempotency-Key, for a caller that keeps its own ids (a UUIDv7);
   * default: a new one. A key already in the outbox for the same request
   * names that intent; for another request it is refused.
   */
  readonly key?: string;
}

/** What the final state of an intent is recorded with. */
export interface FinalRecord {
  /** The attempts made, this one included. */
  readonly attempts: number;
  /** `done` or `failed`. */
  readonly state: 'done' | 'failed';
  /** Why, for `failed`; null for `done`. */
  readonly failure: FailureReason | null;
  /** The answer. */
  readonly answer: RecordedAnswer;
  /** The current time in milliseconds since the epoch. */
  readonly now: number;
  /**
   * A note on the answer, kept as the intent's last error, e.g. that its
   * body was too large to keep; default none (the last error is left).
   */
  readonly note?: string;
}

/** Options of {@link Outbox.open}. */
export interface OutboxOptions {
  /** The clock stamping new intents, in milliseconds since the epoch; default `Date.now`. */
  readonly clock?: () => number;
  /**
   * Whether a missing file is made into a new outbox; default true. False
   * for readers such as `outbox list`: a missing or empty file is refused and
   * left as it was.
   */
  readonly create?: boolean;
  /**
   * Told when the outbox's file system keeps no file modes (a Windows
   * drive under WSL, vfat), so whether other users may read or write the
   * file could not be checked; default a process warning
   * (`OUTBOX_MODES_UNCHECKED`).
   */
  readonly onWarning?: (detail: string) => void;
}

/** The storage settings of an open outbox, as SQLite reports them. */
export interface StorageSettings {
  /** `wal`. */
  readonly journalMode: string;
  /** `full`. */
  readonly synchronous: string;
  /** `exclusive`. */
  readonly lockingMode: string;
  /** Whether foreign keys are enforced (true once open). */
  readonly foreignKeys: boolean;
}

/** The HTTP methods of writes, as stored. */
export const METHODS: readonly string[] = ['POST', 'PUT', 'PATCH', 'DELETE'];
/**
 * A path that a URL parser reads as naming a host (`//host/...`, and
 * `/\host/...`, as a backslash is a slash in http URLs): sent, the token
 * would go to that host.
 */
export const OTHER_HOST = /^\/[/\\]/;
/**
 * A control character (C0 or DEL): a URL parser drops tab, CR and LF, so
 * `/\t/host/...` reads as `//host/...`, another host, which would get the
 * token; none belongs in a path of this API.
 */
// eslint-disable-next-line no-control-regex
export const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * What is wrong with a path an intent would be sent to: one that does not
 * start with `/`, holds a control character, names another host (`//` or
 * `/\\`), or carries a query or fragment (keyed requests take none).
 *
 * @param path the path.
 * @returns the problem in one line, or undefined for a good path.
 */
export function pathProblem(path: string): string | undefined {
  if (!path.startsWith('/')) return `path must start with "/", got "${path}"`;
  if (CONTROL.test(path)) {
    return `path must not hold a control character (a URL parser drops tab, CR and LF, so it could name another host, which would get the token); got ${JSON.stringify(path)}`;
  }
  if (OTHER_HOST.test(path)) {
    return `path must not start with "//" (or "/\\"): it names another host, which would get the token; got "${path}"`;
  }
  if (path.includes('?') || path.includes('#')) {
    return 'path may not carry a query or fragment (keyed requests take none)';
  }
  return undefined;
}

/**
 * A new intent's body in the RFC 8785 form it is stored and sent in.
 *
 * @param intent the intent.
 * @returns the body's text, or null for none.
 */
export function canonicalBody(intent: Pick<NewIntent, 'body'>): string | null {
  return intent.body === undefined ? null : (canonicalize(intent.body) ?? null);
}
