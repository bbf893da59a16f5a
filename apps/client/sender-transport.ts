/**
 * The sender's HTTP transport: one request with the bearer token, a time
 * limit and no redirects followed, its answer read (the body up to
 * {@link MAX_BODY_BYTES}) into what the outbox records, and the rule that a
 * path never leaves the origin the token is for.
 */
import { OutboxCorruptError, type RecordedAnswer } from './outbox.js';
import { parseHttpDate } from './retry.js';

/** The header in which the server tells how long it keeps a key, in whole seconds. */
const KEY_LIFETIME_HEADER = 'idempotency-key-lifetime';

/**
 * Reads `Idempotency-Key-Lifetime`: whole seconds (an RFC 8941 integer).
 *
 * @returns milliseconds, or undefined when absent or not an integer.
 */
function parseKeyLifetime(value: string | null): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (!/^\d{1,15}$/.test(text)) return undefined;
  return Number(text) * 1_000;
}

/** An answer as read off the wire. */
export interface WireAnswer extends RecordedAnswer {
  /** Whether the body was larger than {@link MAX_BODY_BYTES}; its text is then empty. */
  readonly oversize: boolean;
  /** The server's `Date`, when it sent a readable one. */
  readonly serverTime: number | undefined;
  /** The key lifetime the answer told (`Idempotency-Key-Lifetime`), in milliseconds. */
  readonly keyLifetimeMs: number | undefined;
  /** Read off the wire, the marker is always known. */
  readonly marked: boolean;
  readonly retryAfter: string | null;
  readonly code: string | undefined;
}

/**
 * The largest answer body read, in bytes: no answer of this API comes near
 * it, and a larger one (a gateway's, a misrouted download) is not read
 * whole into memory and the outbox.
 */
export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * Reads a body up to {@link MAX_BODY_BYTES}, cancelling the rest.
 *
 * @returns its text, or an empty text and `oversize` when it is larger.
 */
async function readBody(res: Response): Promise<{ text: string; oversize: boolean }> {
  if (res.body === null) return { text: '', oversize: false };
  const reader: ReadableStreamDefaultReader<Uint8Array> = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_BODY_BYTES) {
      await reader.cancel();
      return { text: '', oversize: true };
    }
    chunks.push(value);
  }
  return { text: Buffer.concat(chunks).toString('utf8'), oversize: false };
}

/**
 * The last error of an intent whose final answer had a body over
 * {@link MAX_BODY_BYTES}: its recorded body is empty.
 */
export const OVERSIZE_NOTE = `the answer body is over ${String(MAX_BODY_BYTES)} bytes, not kept`;

/** The headers an answer is recorded with. */
const KEPT_HEADERS = ['location', 'etag', 'content-type', 'correlation-id'];

/**
 * What a failed request met, in one line: a timeout, a lost connection, or
 * the network error's code and text.
 *
 * @param err what fetch threw.
 * @param timeoutMs the attempt's limit, for a timeout's message.
 * @returns the line.
 */
export function describeError(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && err.name === 'TimeoutError') {
    return `timeout after ${String(timeoutMs)}ms`;
  }
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  const code = typeof cause?.code === 'string' ? cause.code : undefined;
  const text = typeof cause?.message === 'string' ? cause.message : String(err);
  if (
    code === 'UND_ERR_SOCKET' ||
    code === 'ECONNRESET' ||
    code === 'EPIPE' ||
    /other side closed|socket hang up/i.test(text)
  ) {
    return `connection lost: ${text}`;
  }
  return code === undefined ? text : `${code}: ${text}`;
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
function problemCode(body: string): string | undefined {
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

/** Sends requests to one origin with one token. */
export class Transport {
  /** The origin requests go to. */
  readonly origin: URL;

  /**
   * @param baseUrl the server's origin.
   * @param token the bearer token.
   * @param timeoutMs one request's limit, answer body included.
   * @param fetch the fetch implementation.
   * @throws RangeError for a base URL that is not an http(s) origin or is
   *   on a port fetch refuses, or an empty token.
   */
  constructor(
    baseUrl: string,
    private readonly token: string,
    private readonly timeoutMs: number,
    private readonly fetch: typeof globalThis.fetch,
  ) {
    let origin: URL | undefined;
    try {
      origin = new URL(baseUrl);
    } catch {
      origin = undefined;
    }
    if (
      origin === undefined ||
      (origin.protocol !== 'http:' && origin.protocol !== 'https:') ||
      origin.pathname !== '/' ||
      origin.search !== '' ||
      origin.hash !== ''
    ) {
      throw new RangeError(
        `baseUrl must be an http or https origin without path, query or fragment, got "${baseUrl}"`,
      );
    }
    const refused = badPort(origin);
    if (refused !== undefined) {
      throw new RangeError(
        `baseUrl's port ${String(refused)} is one fetch refuses to connect to (a bad port of the Fetch standard); use another port`,
      );
    }
    if (token === '') throw new RangeError('token must not be empty');
    this.origin = origin;
  }

  /**
   * A path resolved against the origin, which it must stay on.
   *
   * @throws OutboxCorruptError when it resolves to another origin (a row
   *   the outbox would refuse, e.g. `/\t/host/x`, as the URL parser drops
   *   tab, CR and LF): nothing is sent.
   */
  url(path: string): URL {
    const url = new URL(path, this.origin);
    if (url.origin !== this.origin.origin) {
      throw new OutboxCorruptError(
        `the path ${JSON.stringify(path)} resolves to another origin (${url.origin}), which would get the token; it is not sent: repair or remove the intent`,
      );
    }
    return url;
  }

  /**
   * Sends one request and reads its answer.
   *
   * @param method the HTTP method.
   * @param path the path from the origin.
   * @param body the body's text, or null for none.
   * @param key the Idempotency-Key, or undefined for none.
   * @param signal aborts the request.
   * @returns the answer as read.
   * @throws OutboxCorruptError when the path leaves the origin (nothing is sent).
   * @throws the error of fetch (network, timeout, abort).
   */
  async request(
    method: string,
    path: string,
    body: string | null,
    key: string | undefined,
    signal: AbortSignal,
  ): Promise<WireAnswer> {
    // Checked before the token is attached.
    const url = this.url(path);
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}` };
    if (body !== null) headers['content-type'] = 'application/json';
    if (key !== undefined) headers['idempotency-key'] = key;
    const both = AbortSignal.any([signal, AbortSignal.timeout(this.timeoutMs)]);
    const res = await this.fetch(url, {
      method,
      headers,
      body,
      signal: both,
      redirect: 'manual',
    });
    const { text, oversize } = await readBody(res);
    const kept: Record<string, string> = {};
    for (const name of KEPT_HEADERS) {
      const value = res.headers.get(name);
      if (value !== null) kept[name] = value;
    }
    const marker = res.headers.get('idempotent-replay')?.trim().toLowerCase();
    return {
      oversize,
      status: res.status,
      replayed: marker === 'true',
      marked: marker === 'true' || marker === 'false',
      headers: kept,
      body: text,
      retryAfter: res.headers.get('retry-after'),
      serverTime: parseHttpDate(res.headers.get('date')),
      keyLifetimeMs: parseKeyLifetime(res.headers.get(KEY_LIFETIME_HEADER)),
      code: res.status >= 400 ? problemCode(text) : undefined,
    };
  }
}

/**
 * The ports fetch refuses to connect to (the Fetch standard's "bad ports",
 * which Node.js's fetch applies): a request to one fails at once with "bad
 * port", however often it is repeated, so an origin on one is refused
 * before anything is stated or sent. A test checks the list against fetch.
 */
export const BAD_PORTS: ReadonlySet<number> = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102,
  103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
  512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993,
  995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668,
  6669, 6679, 6697, 10080,
]);

/**
 * The port of an http(s) origin when it is one fetch refuses.
 *
 * @param origin the parsed origin.
 * @returns the port, or undefined when fetch connects to it.
 */
export function badPort(origin: URL): number | undefined {
  const port = Number(origin.port === '' ? (origin.protocol === 'https:' ? 443 : 80) : origin.port);
  return BAD_PORTS.has(port) ? port : undefined;
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
