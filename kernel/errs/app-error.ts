import { isProblemCode, problemCatalogue } from './catalogue.js';
import type { ProblemCode } from './catalogue.js';

/**
 * One entry of a problem's `errors` list: which part of the request is wrong,
 * and how.
 */
export interface ProblemFieldError {
  /**
   * Where: a JSON pointer into the body as a URI fragment (`#/amount`), or
   * `#header/<Name>`, `#query`, `#path/<param>` for other parts of the request.
   */
  readonly pointer: string;
  /** What is wrong, as a stable snake_case code (`required`, `invalid_format`). */
  readonly code: string;
  /** A human-readable explanation, when the code alone does not say enough. */
  readonly detail?: string;
}

/** Optional members of an {@link AppError}. */
export interface ProblemExtras {
  /** Per-field findings, sent as the body's `errors`. */
  readonly errors?: ReadonlyArray<ProblemFieldError>;
  /** A snake_case refinement of the code (`one_time_secret`), sent as `reason`. */
  readonly reason?: string;
  /** What the client can do about it, sent as `hint`. */
  readonly hint?: string;
  /** Becomes the `Retry-After` header: a whole number of seconds, 0 or more. */
  readonly retryAfterSeconds?: number;
  /** Further response headers (`Allow`, `WWW-Authenticate`); names are stored lower-cased. */
  readonly headers?: Readonly<Record<string, string>>;
  /** The error that led to this one: logged, never sent to the client. */
  readonly cause?: unknown;
}

/**
 * An error meant for the client: the error handler turns it into an RFC 9457
 * problem body with {@link toProblemBody}; any other error becomes a
 * `500 internal_error` that reveals nothing.
 *
 * The status is not a parameter: it comes from {@link problemCatalogue}, so a
 * code and its status can never disagree. Optional members that were not given
 * are absent, not undefined, and the given ones are copied and frozen, so the
 * error cannot change after it is thrown.
 *
 * @example
 * throw new AppError('not_found', `no account ${id}`);
 */
export class AppError extends Error {
  /** The stable snake_case code, a key of the catalogue. */
  readonly code: ProblemCode;
  /** The HTTP status, taken from the catalogue. */
  readonly status: number;
  /** What went wrong in this occurrence, for the client; also the message. */
  readonly detail: string;
  // Declared, not defined, so that an absent member is truly absent (with
  // class fields defined by default it would be an own property set to undefined).
  /** Per-field findings. */
  declare readonly errors?: ReadonlyArray<ProblemFieldError>;
  /** A snake_case refinement of the code. */
  declare readonly reason?: string;
  /** What the client can do about it. */
  declare readonly hint?: string;
  /** The `Retry-After` delay in whole seconds. */
  declare readonly retryAfterSeconds?: number;
  /** Further response headers. */
  declare readonly headers?: Readonly<Record<string, string>>;

  /**
   * @param code - the error code; its status comes from the catalogue.
   * @param detail - the occurrence-specific explanation sent to the client:
   *   never put secrets or internals in it.
   * @param extras - optional members; see {@link ProblemExtras}.
   * @throws {TypeError} when `code` is not in the catalogue (only possible
   *   through a cast).
   * @throws {RangeError} when `retryAfterSeconds` is not a non-negative integer.
   */
  constructor(code: ProblemCode, detail: string, extras: ProblemExtras = {}) {
    if (!isProblemCode(code)) {
      throw new TypeError(`unknown problem code ${JSON.stringify(code)}`);
    }
    const { errors, reason, hint, retryAfterSeconds, headers, cause } = extras;
    if (
      retryAfterSeconds !== undefined &&
      !(Number.isSafeInteger(retryAfterSeconds) && retryAfterSeconds >= 0)
    ) {
      throw new RangeError(
        `retryAfterSeconds must be a non-negative integer, got ${retryAfterSeconds}`,
      );
    }
    super(detail, cause === undefined ? undefined : { cause });
    this.name = 'AppError';
    this.code = code;
    this.status = problemCatalogue[code].status;
    this.detail = detail;
    if (errors !== undefined) {
      this.errors = Object.freeze(errors.map((e) => Object.freeze(copyFieldError(e))));
    }
    if (reason !== undefined) {
      this.reason = reason;
    }
    if (hint !== undefined) {
      this.hint = hint;
    }
    if (retryAfterSeconds !== undefined) {
      this.retryAfterSeconds = retryAfterSeconds;
    }
    if (headers !== undefined) {
      // HTTP header names are case-insensitive: one spelling per name keeps a
      // header from being sent twice under two spellings.
      this.headers = Object.freeze(
        Object.fromEntries(
          Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]),
        ),
      );
    }
  }

  /** The catalogue title of the code. */
  get title(): string {
    return problemCatalogue[this.code].title;
  }
}

/**
 * Copies one field error into a new plain object, leaving `detail` out when
 * absent. Internal to kernel/errs: not exported by its index.
 *
 * @param e - the entry to copy.
 * @returns the copy, not frozen.
 */
export function copyFieldError(e: ProblemFieldError): ProblemFieldError {
  return e.detail === undefined
    ? { pointer: e.pointer, code: e.code }
    : { pointer: e.pointer, code: e.code, detail: e.detail };
}

/**
 * Creates an {@link AppError}: the usual way to make one, reading like the
 * problem it describes.
 *
 * @param code - the error code; its status comes from the catalogue.
 * @param detail - the occurrence-specific explanation sent to the client.
 * @param extras - optional members; see {@link ProblemExtras}.
 * @returns the error, to be thrown.
 * @throws {TypeError} when `code` is not in the catalogue.
 * @throws {RangeError} when `retryAfterSeconds` is not a non-negative integer.
 * @example
 * throw problem('request_in_progress', 'the key is in use', { retryAfterSeconds: 1 });
 */
export function problem(code: ProblemCode, detail: string, extras?: ProblemExtras): AppError {
  return new AppError(code, detail, extras);
}

/**
 * Tells whether a thrown value is an {@link AppError}, whose detail may be sent
 * to the client. Look-alike objects do not count: only errors built on purpose
 * may speak to the client.
 *
 * @param e - any thrown value.
 * @returns true when `e` is an AppError.
 */
export function isAppError(e: unknown): e is AppError {
  return e instanceof AppError;
}
