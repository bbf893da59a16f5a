/**
 * One mapping from anything thrown to an {@link AppError}, used by the error
 * handler and by the idempotency plugin, so a keyed answer and an unkeyed one
 * carry the same problem for the same failure.
 */
import {
  AppError,
  isAppError,
  problem,
  problemCatalogue,
  type ProblemFieldError,
} from '../../kernel/errs/index.js';
import { isRetryable } from '../../kernel/txn/index.js';

/** The subset of Fastify's validation error item this module reads. */
interface ValidationItem {
  readonly instancePath?: string;
  readonly keyword?: string;
  readonly message?: string;
  readonly params?: Record<string, unknown>;
}

/** Where Fastify's validation error happened, mapped to our pointer roots. */
const CONTEXT_ROOT: Readonly<Record<string, string>> = {
  body: '#body',
  querystring: '#query',
  params: '#path',
  headers: '#header',
};

/**
 * Database conditions a client may retry: timeouts, lost or refused
 * connections, a server shutting down (failover).
 */
const UNAVAILABLE_CODES: ReadonlySet<string> = new Set([
  '57014', // statement_timeout
  '25P03', // idle_in_transaction_session_timeout
  '25P04', // transaction_timeout
  '57P01', // admin_shutdown (pg_terminate_backend, fast shutdown)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '53300', // too_many_connections
  'RESULT_INCOMPLETE', // the driver's state was stale after a lost connection (platform/pg)
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'CONNECTION_STALLED', // nothing heard on a connection within its deadline (platform/pg)
  'ECONNREFUSED',
  'ECONNRESET',
]);

function isUnavailable(code: unknown): boolean {
  return typeof code === 'string' && (UNAVAILABLE_CODES.has(code) || code.startsWith('08'));
}

/**
 * How many entries the `errors` list of a validation problem holds at most;
 * the detail counts the rest. Documented in docs/api/README.md.
 */
export const MAX_LISTED_FIELD_ERRORS = 100;

/**
 * How many findings a TypeBox-compiled validator collects before it stops
 * looking. TypeBox's default is 8, too few to name what is wrong with a
 * body of a few unknown members and a wrong value. High enough for any honest request, bounded so a body of
 * thousands of wrong members costs no more than a few milliseconds; the
 * answer lists at most {@link MAX_LISTED_FIELD_ERRORS} of them, and a list
 * that reached this many is counted as "at least", since the validator
 * stopped looking there.
 */
export const VALIDATION_SCAN_LIMIT = 1000;

const CONTENT_RANGE = /^bytes \*\/\d{1,16}$/;

/**
 * The `Content-Range` of an http-errors error (`headers` member, any case),
 * when it is the unsatisfied-range form: `bytes`, a space, a star, a slash
 * and the file's size in bytes.
 *
 * @param err the library's error.
 * @returns the header's value, or undefined when absent or of another shape.
 */
function contentRangeOf(err: unknown): string | undefined {
  const headers = (err as { headers?: unknown }).headers;
  if (typeof headers !== 'object' || headers === null) return undefined;
  for (const [name, value] of Object.entries(headers)) {
    if (name.toLowerCase() === 'content-range' && typeof value === 'string') {
      return CONTENT_RANGE.test(value) ? value : undefined;
    }
  }
  return undefined;
}

const snake = (s: string): string => s.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();

/**
 * Turns Fastify/Ajv validation items into field errors with JSON pointers
 * prefixed by the part of the request (`#body/amount`, `#query`, ...).
 *
 * @param context Fastify's `validationContext`.
 * @param items the validation items.
 * @returns one field error per item.
 */
export function fieldErrors(
  context: string | undefined,
  items: readonly ValidationItem[],
): ProblemFieldError[] {
  const root = CONTEXT_ROOT[context ?? 'body'] ?? '#body';
  // A validator that fails without naming anything (one that filtered its
  // own findings away) still gets an entry: an empty list reads as "nothing
  // wrong", and a client that shows errors[] would show nothing.
  if (items.length === 0) return [{ pointer: root, code: 'invalid' }];
  return items.map((item) => {
    let path = item.instancePath ?? '';
    if (item.keyword === 'required' && typeof item.params?.['missingProperty'] === 'string') {
      path = `${path}/${item.params['missingProperty'].replace(/~/g, '~0').replace(/\//g, '~1')}`;
    }
    const code = item.keyword === undefined ? 'invalid' : snake(item.keyword);
    return item.message === undefined
      ? { pointer: `${root}${path}`, code }
      : { pointer: `${root}${path}`, code, detail: item.message };
  });
}

/**
 * Maps anything thrown while serving a request to the problem the client gets.
 * Unknown errors become `internal_error` with a generic detail: internals
 * (messages, stacks, SQL) never reach the body; the caller logs the original.
 *
 * @param err anything thrown.
 * @returns an AppError (the same object when it already is one).
 */
export function toAppError(err: unknown): AppError {
  if (isAppError(err)) return err;
  const e = (typeof err === 'object' && err !== null ? err : {}) as {
    code?: unknown;
    statusCode?: unknown;
    validation?: unknown;
    validationContext?: unknown;
    message?: unknown;
    name?: unknown;
  };
  if (Array.isArray(e.validation)) {
    const context = typeof e.validationContext === 'string' ? e.validationContext : undefined;
    const items = e.validation as ValidationItem[];
    const listed = fieldErrors(context, items.slice(0, MAX_LISTED_FIELD_ERRORS));
    // A body can hold thousands of wrong members: the answer lists a bounded
    // number and counts the rest in the detail, so a 400 stays small.
    const count =
      items.length >= VALIDATION_SCAN_LIMIT
        ? `at least ${String(items.length)}`
        : String(items.length);
    const detail =
      items.length > MAX_LISTED_FIELD_ERRORS
        ? `The request is not valid: ${count} problems, the first ${String(MAX_LISTED_FIELD_ERRORS)} listed.`
        : 'The request is not valid.';
    return problem('validation_failed', detail, { errors: listed, cause: err });
  }
  if (e.code === 'FST_STATIC_FORBIDDEN_PATH') {
    // @fastify/static refuses a path that climbs out of its folder or that
    // it cannot check (`..`, `.`, `//`, a NUL, a name too long for the file
    // system): the client's request, not a server fault.
    return problem('forbidden_path', 'The request path is not allowed.', { cause: err });
  }
  if (e.statusCode === 412 && e.name === 'PreconditionFailedError') {
    // @fastify/send's answer to an If-Match or If-Unmodified-Since that a
    // static file fails (RFC 9110 section 13.1). Matched by name as well,
    // so that no other library's stray 412 becomes a client's answer.
    return problem(
      'precondition_failed',
      'A condition of the request does not hold for the file.',
      {
        cause: err,
      },
    );
  }
  if (e.statusCode === 416) {
    // @fastify/send's RangeNotSatisfiableError carries the Content-Range
    // that RFC 9110 asks for (`bytes */<size>`); only that shape is copied.
    const range = contentRangeOf(err);
    return problem('range_not_satisfiable', 'The requested range is outside the file.', {
      ...(range === undefined ? {} : { headers: { 'content-range': range } }),
      hint: 'Read the size in Content-Range and ask for a range within it, or send no Range.',
      cause: err,
    });
  }
  switch (e.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return problem('payload_too_large', 'The request body is larger than this route accepts.', {
        cause: err,
      });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return problem('unsupported_media_type', 'This route accepts application/json bodies only.', {
        hint: 'Send the body with Content-Type: application/json.',
        cause: err,
      });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return problem('validation_failed', 'The body is empty but the content type says JSON.', {
        errors: [{ pointer: '#body', code: 'empty' }],
        cause: err,
      });
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return problem('validation_failed', 'The body is not valid JSON.', {
        errors: [{ pointer: '#body', code: 'invalid_json' }],
        cause: err,
      });
    default:
      break;
  }
  if (err instanceof SyntaxError && e.statusCode === 400) {
    return problem('validation_failed', 'The body is not valid JSON.', {
      errors: [{ pointer: '#body', code: 'invalid_json' }],
      cause: err,
    });
  }
  if (e.code === 'COMMIT_OUTCOME_UNKNOWN') {
    return problem(
      'commit_outcome_unknown',
      'The change may or may not have been made: the answer to its commit was lost.',
      {
        // No Retry-After here: a client or proxy that repeats any 503 with
        // one would repeat a request without a key blindly. The keyed path
        // adds it (a repeat with the key is safe).
        hint: 'Repeat the request with the same Idempotency-Key: the stored answer comes back if the change was made, and it is made once if it was not. Without a key, check whether it was made before repeating it.',
        cause: err,
      },
    );
  }
  if (isRetryable(err) || isUnavailable(e.code)) {
    // Contention that outlived the retries, or a timeout: the client may try again.
    return problem('service_unavailable', 'The service is busy; try again shortly.', {
      retryAfterSeconds: 1,
      cause: err,
    });
  }
  const status = typeof e.statusCode === 'number' ? e.statusCode : 500;
  const byStatus: Readonly<Record<number, Parameters<typeof problem>[0]>> = {
    400: 'validation_failed',
    404: 'not_found',
    405: 'method_not_allowed',
    413: 'payload_too_large',
    415: 'unsupported_media_type',
    429: 'rate_limited',
    503: 'service_unavailable',
  };
  // Only statuses this table names become client problems: a stray 4xx of
  // unknown meaning (a 401 of an upstream, a 408, a 425) must not become a
  // final answer stored under an idempotency key; it is a 500, not stored.
  const code = byStatus[status];
  if (code !== undefined && code !== 'validation_failed') {
    // The catalogue's words, not the thrown message: a library's message may
    // name internals.
    return problem(code, problemCatalogue[code].title, { cause: err });
  }
  if (code === 'validation_failed') {
    return problem('validation_failed', 'The request is not valid.', {
      errors: [{ pointer: '#', code: 'invalid' }],
      cause: err,
    });
  }
  return new AppError('internal_error', 'An unexpected error occurred.', { cause: err });
}
