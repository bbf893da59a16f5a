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
  validationProblem,
} from '../../kernel/errs/index.js';
import { isRetryable } from '../../kernel/txn/index.js';

export {
  fieldErrors,
  MAX_LISTED_FIELD_ERRORS,
  VALIDATION_SCAN_LIMIT,
} from '../../kernel/errs/index.js';

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
  'RESULT_UNANSWERED', // the driver settled a statement sent as its connection was lost (platform/pg)
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
    message?: unknown;
    name?: unknown;
  };
  const invalid = validationProblem(err);
  if (invalid !== undefined) return invalid;
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
