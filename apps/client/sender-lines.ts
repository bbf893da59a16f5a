/**
 * What the sender says of what it met, each in one line: a failed
 * request, an answer for a message, the principal of `GET /api/v1/me`,
 * and a problem's `code`.
 */

/**
 * What a failed request met, in one line: a timeout, a lost connection, or
 * the network error's code and text.
 *
 * @param err what the request was rejected with.
 * @param timeoutMs the attempt's limit, for a timeout's message.
 * @returns the line.
 */
export function describeError(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && err.name === 'TimeoutError') {
    return `timeout after ${String(timeoutMs)}ms`;
  }
  const { code, message } = err as { code?: unknown; message?: unknown };
  // One line: TLS errors, for one, carry OpenSSL's line breaks.
  const text = (typeof message === 'string' ? message : String(err))
    .replace(/\s*[\r\n]+\s*/g, ' ')
    .trim();
  // A reset, a write to a closed socket, or a close before the answer
  // ended (`socket hang up` before its headers, `aborted` after them):
  // Node.js gives each the code ECONNRESET or EPIPE.
  if (code === 'ECONNRESET' || code === 'EPIPE') {
    return `connection lost: ${text}`;
  }
  return typeof code === 'string' ? `${code}: ${text}` : text;
}

/**
 * The principal's id in an answer of `GET /api/v1/me`.
 *
 * @param body the answer's text.
 * @returns the id, or undefined when the body holds none.
 */
export function principalId(body: string): string | undefined {
  try {
    const value = JSON.parse(body) as { id?: unknown } | null;
    return typeof value?.id === 'string' ? value.id : undefined;
  } catch {
    return undefined;
  }
}

/** The `code` of a problem body, or undefined when it has none. */
export function problemCode(body: string): string | undefined {
  try {
    const value = JSON.parse(body) as unknown;
    if (typeof value === 'object' && value !== null && 'code' in value) {
      const { code } = value;
      return typeof code === 'string' ? code : undefined;
    }
  } catch {
    // not JSON: no problem code
  }
  return undefined;
}

/**
 * An answer in one line for a message: its status, and the problem's
 * `code` and `detail` when the body is a problem, else the start of the
 * body on one line.
 *
 * @param answer the status and the body's text.
 * @returns e.g. `401 unauthenticated: The bearer token is not valid`
 */
export function answerLine(answer: { readonly status: number; readonly body: string }): string {
  let value: unknown;
  try {
    value = JSON.parse(answer.body) as unknown;
  } catch {
    value = undefined;
  }
  const problem =
    typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};
  const code = typeof problem['code'] === 'string' ? ` ${problem['code']}` : '';
  // Without its closing full stop, so the line goes on after it.
  const detail =
    typeof problem['detail'] === 'string' ? problem['detail'].replace(/\.$/, '') : undefined;
  if (code !== '' || detail !== undefined) {
    return `${String(answer.status)}${code}${detail === undefined ? '' : `: ${detail}`}`;
  }
  const text = answer.body.replace(/\s+/g, ' ').trim().slice(0, 200);
  return `${String(answer.status)}${text === '' ? '' : `: ${text}`}`;
}
