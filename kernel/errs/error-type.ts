/**
 * The `error.type` of a thrown value, one rule for every span that records
 * a failure (the idempotency plugin's, a PostgreSQL statement's, a cleanup
 * run's): OpenTelemetry's semantic conventions ask for a low-cardinality
 * type, never the message, so it is the SQLSTATE when there is one and the
 * error's name otherwise.
 */

/**
 * A SQLSTATE: five digits or capitals, at least one a digit (every
 * SQLSTATE class has one), so a Node.js error code of five capitals
 * (`EBADF`, `EPERM`) is not taken for one.
 */
const SQLSTATE = /^(?=[A-Z]*[0-9])[0-9A-Z]{5}$/;

/**
 * Whether a code is shaped like a SQLSTATE.
 *
 * @param code the candidate, e.g. an error's `code`.
 * @returns true for five digits or capitals with at least one digit.
 */
export function isSqlState(code: unknown): code is string {
  return typeof code === 'string' && SQLSTATE.test(code);
}

/**
 * The `error.type` of what was thrown.
 *
 * @param err any thrown value.
 * @returns its `code` when that is a SQLSTATE (a PostgreSQL error, or one
 *   shaped like it), else its non-empty `name`, else `_OTHER` (also when
 *   reading them throws); never empty, never the message, never throws.
 */
export function errorType(err: unknown): string {
  if (err === null || (typeof err !== 'object' && typeof err !== 'function')) return '_OTHER';
  try {
    const { code, name } = err as { code?: unknown; name?: unknown };
    if (isSqlState(code)) return code;
    return typeof name === 'string' && name !== '' ? name : '_OTHER';
  } catch {
    // A getter that throws, or a Proxy (revoked, or whose trap throws):
    // the span that records the failure must still end, and the error it
    // records must be the one thrown, not this one.
    return '_OTHER';
  }
}
