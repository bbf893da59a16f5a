/**
 * One entry of the problem catalogue: what an error code means on the wire.
 */
export interface ProblemDefinition {
  /** The HTTP status every error of this code answers with. */
  readonly status: number;
  /** The RFC 9457 `title`: short, the same for every occurrence of the code. */
  readonly title: string;
  /** What the code means and what a client can do about it, for the API docs. */
  readonly description: string;
}

const definitions = {
  validation_failed: {
    status: 400,
    title: 'Validation failed',
    description:
      'The request is malformed or breaks the operation schema; errors names each offending member by JSON pointer and code.',
  },
  unauthenticated: {
    status: 401,
    title: 'Unauthenticated',
    description:
      'The request carries no valid credentials: the bearer token is missing, unknown, expired or revoked.',
  },
  step_up_required: {
    status: 401,
    title: 'Step-up required',
    description:
      'The credentials are valid but not strong enough for this operation; authenticate again as the hint says and repeat the request.',
  },
  forbidden: {
    status: 403,
    title: 'Forbidden',
    description: 'The caller is authenticated but not allowed to perform this operation.',
  },
  forbidden_path: {
    status: 403,
    title: 'Forbidden path',
    description:
      'The request path is refused as it stands: it climbs out of the folder it names (`..`, `.`, `//`), holds a NUL, or names a file too long to look up. Ask for the file by its plain path.',
  },
  not_found: {
    status: 404,
    title: 'Not found',
    description: 'The resource does not exist, or the caller is not allowed to know that it does.',
  },
  method_not_allowed: {
    status: 405,
    title: 'Method not allowed',
    description:
      'The resource does not support this HTTP method; the Allow header lists the methods it does support.',
  },
  conflict: {
    status: 409,
    title: 'Conflict',
    description:
      'The request conflicts with the current state of the resource; reason names the conflict.',
  },
  request_in_progress: {
    status: 409,
    title: 'Request in progress',
    description:
      'Another request with the same idempotency key is still being processed; repeat it after the Retry-After delay.',
  },
  gone: {
    status: 410,
    title: 'Gone',
    description: 'The resource existed but has been removed for good.',
  },
  precondition_failed: {
    status: 412,
    title: 'Precondition failed',
    description:
      'An If-Match or If-None-Match condition did not hold: the resource changed since it was read. Read it again and retry.',
  },
  request_timeout: {
    status: 408,
    title: 'Request timeout',
    description:
      'The request did not arrive completely in time; send it again (with the same Idempotency-Key).',
  },
  payload_too_large: {
    status: 413,
    title: 'Payload too large',
    description: 'The request body is larger than the operation accepts.',
  },
  unsupported_media_type: {
    status: 415,
    title: 'Unsupported media type',
    description:
      'The request body is not in a media type the operation accepts; send application/json.',
  },
  expectation_failed: {
    status: 417,
    title: 'Expectation failed',
    description:
      'The request carries an Expect header the server cannot meet; send it without one (100-continue is understood).',
  },
  range_not_satisfiable: {
    status: 416,
    title: 'Range not satisfiable',
    description:
      'The Range header asks for bytes the file does not have, or is malformed; Content-Range (bytes */<size>) gives the size. Ask for a range within it, or send no Range.',
  },
  idempotency_key_reuse: {
    status: 422,
    title: 'Idempotency key reused',
    description:
      'This principal already used the idempotency key for a different request; a new request needs a new key.',
  },
  unprocessable: {
    status: 422,
    title: 'Unprocessable content',
    description:
      'The request is well formed but breaks a business rule, so it cannot be carried out as asked.',
  },
  precondition_required: {
    status: 428,
    title: 'Precondition required',
    description:
      'The operation needs a conditional request: send If-Match with the current ETag of the resource.',
  },
  rate_limited: {
    status: 429,
    title: 'Too many requests',
    description: 'The caller has sent too many requests; repeat after the Retry-After delay.',
  },
  request_header_fields_too_large: {
    status: 431,
    title: 'Request header fields too large',
    description:
      'The request head is larger than the server accepts; send fewer or shorter headers.',
  },
  internal_error: {
    status: 500,
    title: 'Internal error',
    description:
      'The server failed unexpectedly and discloses nothing about why; quote the correlation id when reporting it.',
  },
  service_unavailable: {
    status: 503,
    title: 'Service unavailable',
    description:
      'The server cannot handle the request right now (starting, stopping or overloaded); repeat it later.',
  },
  commit_outcome_unknown: {
    status: 503,
    title: 'Outcome unknown',
    description:
      'The change was sent to the database for its final commit and the answer was lost: it may have taken effect or not. Repeat a keyed request with the same Idempotency-Key (the stored answer comes back if it took effect, and it runs once if it did not); check before repeating a request without a key.',
  },
} as const satisfies Record<string, ProblemDefinition>;

for (const definition of Object.values(definitions)) {
  Object.freeze(definition);
}

/**
 * Every error code the API can answer with, and its status, title and
 * description. The one source of truth: an {@link AppError} takes its status
 * from here, the error handler its title, the API docs their table. Frozen
 * all the way down, so no module can redefine a code at run time.
 *
 * Adding a code is an API change: document it, and never reuse or rename one.
 */
export const problemCatalogue: Readonly<typeof definitions> = Object.freeze(definitions);

/** A stable snake_case error code: a key of {@link problemCatalogue}. */
export type ProblemCode = keyof typeof problemCatalogue;

/** The RFC 9457 `type` URI of a code. */
export type ProblemType = `urn:problem-type:${ProblemCode}`;

/**
 * Tells whether a string is a code of the catalogue. Only own members count,
 * so names inherited from Object.prototype (`toString`, `constructor`) are not
 * codes.
 *
 * @param s - the candidate.
 * @returns true when `s` is a {@link ProblemCode}.
 */
export function isProblemCode(s: string): s is ProblemCode {
  return Object.hasOwn(problemCatalogue, s);
}

/**
 * Builds the RFC 9457 `type` member of a code.
 *
 * @param code - the error code.
 * @returns `urn:problem-type:<code>`.
 */
export function problemType(code: ProblemCode): ProblemType {
  return `urn:problem-type:${code}`;
}
