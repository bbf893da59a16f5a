import { copyFieldError } from './app-error.js';
import type { AppError, ProblemFieldError } from './app-error.js';
import { problemType } from './catalogue.js';
import type { ProblemCode, ProblemType } from './catalogue.js';

/**
 * The JSON body of an `application/problem+json` answer (RFC 9457) with the
 * project's extension members `code`, `correlation_id`, `errors`, `reason` and
 * `hint`. Optional members are absent rather than null.
 */
export interface ProblemBody {
  /** `urn:problem-type:<code>`. */
  readonly type: ProblemType;
  /** The catalogue title of the code. */
  readonly title: string;
  /** The HTTP status, repeated so the body stands on its own. */
  readonly status: number;
  /** What went wrong in this occurrence. */
  readonly detail: string;
  /** The stable snake_case code. */
  readonly code: ProblemCode;
  /** The correlation id of the request that first got this answer. */
  readonly correlation_id: string;
  /** Per-field findings. */
  readonly errors?: ReadonlyArray<ProblemFieldError>;
  /** A snake_case refinement of the code. */
  readonly reason?: string;
  /** What the client can do about it. */
  readonly hint?: string;
}

/**
 * Turns an {@link AppError} into its problem body. Pure: the result is a new
 * plain object sharing nothing mutable with the error. The cause, the headers
 * and the Retry-After delay stay out of the body: they are for the log and the
 * response headers.
 *
 * @param err - the error.
 * @param correlationId - the correlation id of the current request.
 * @returns the body, members in the order RFC 9457 lists them, then the
 *   extensions; absent optional members are omitted.
 */
export function toProblemBody(err: AppError, correlationId: string): ProblemBody {
  return {
    type: problemType(err.code),
    title: err.title,
    status: err.status,
    detail: err.detail,
    code: err.code,
    correlation_id: correlationId,
    ...(err.errors === undefined ? {} : { errors: err.errors.map(copyFieldError) }),
    ...(err.reason === undefined ? {} : { reason: err.reason }),
    ...(err.hint === undefined ? {} : { hint: err.hint }),
  };
}
