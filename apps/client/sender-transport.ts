/**
 * The sender's HTTP transport: one request with the bearer token, a time
 * limit and no redirects followed, its answer read (the body up to
 * {@link MAX_BODY_BYTES}) into what the outbox records, and the rule that a
 * path never leaves the origin the token is for.
 *
 * It sends with `node:http` (or `node:https`) on a keep-alive agent of its
 * own, loaded through `process.getBuiltinModule`: importing either as an ES
 * module reads every export of its namespace, and `http.WebSocket` loads
 * fetch's whole HTTP stack (about 50 ms for a command that sends two
 * requests); see docs/DECISIONS.md, "The client sends with node:http".
 */
import type {
  Agent,
  AgentOptions,
  ClientRequest,
  IncomingMessage,
  RequestOptions,
} from 'node:http';
import { OutboxCorruptError, type RecordedAnswer } from './outbox.js';
import { parseHttpDate } from './retry.js';

/** `http` and `https` share what the transport uses of them. */
interface HttpModule {
  readonly Agent: new (options: AgentOptions) => Agent;
  request(
    url: URL,
    options: RequestOptions,
    onAnswer: (res: IncomingMessage) => void,
  ): ClientRequest;
}

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

/** What {@link exchange} read of an answer before the transport records it. */
interface RawAnswer {
  readonly status: number;
  readonly headers: IncomingMessage['headers'];
  readonly text: string;
  readonly oversize: boolean;
}

/**
 * One header's value as one text. Node.js keeps the first of repeated
 * `location`, `etag`, `content-type` and `retry-after` values (fetch joined
 * them) and joins the others with `, `, as fetch does: a repeated
 * `Idempotent-Replay` reads `true, true`, which is no marker.
 */
function header(headers: IncomingMessage['headers'], name: string): string | null {
  const value = headers[name];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}

/** A connection that ended without a usable answer, coded as a reset is. */
function lostConnection(message: string): Error {
  return Object.assign(new Error(message), { code: 'ECONNRESET' });
}

/**
 * One request and its answer, the body read up to {@link MAX_BODY_BYTES}
 * (a larger one is not read: the connection is dropped).
 *
 * @param signal ends the request at any point, body included: rejected
 *   with the signal's reason (a `TimeoutError` for the time limit).
 * @throws the request's network error, or the signal's reason.
 */
function exchange(
  http: HttpModule,
  url: URL,
  options: RequestOptions,
  body: string | null,
  signal: AbortSignal,
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    let settled = false;
    // The answer as read so far, once its headers came.
    let answer: IncomingMessage | undefined;
    const chunks: Buffer[] = [];
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      fn();
    };
    const read = (res: IncomingMessage): RawAnswer => ({
      status: res.statusCode ?? 0,
      headers: res.headers,
      text: Buffer.concat(chunks).toString('utf8'),
      oversize: false,
    });
    const fail = (err: Error): void => {
      // A complete answer, then bytes the parser refused (a gateway that
      // sent more than its Content-Length): the parser errs first, and the
      // answer's body and end are still to be emitted; the end settles it.
      if (answer?.complete === true) return;
      settle(() => {
        req.destroy();
        reject(err);
      });
    };
    // The reason is what `abort()` or the timeout gave: an Error (a
    // `DOMException`) unless a caller aborted with something else.
    function onAbort(): void {
      fail(signal.reason as Error);
    }
    if (signal.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const req = http.request(url, options, (res) => {
      answer = res;
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.byteLength;
        if (size > MAX_BODY_BYTES) {
          settle(() => {
            res.destroy();
            req.destroy();
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              text: '',
              oversize: true,
            });
          });
          return;
        }
        chunks.push(chunk);
      });
      res.once('end', () => {
        settle(() => {
          resolve(read(res));
        });
      });
      // A connection lost mid-body: Node.js errors the answer (`aborted`).
      res.on('error', fail);
    });
    req.on('error', fail);
    // A 101 to a request that asked for no upgrade: node:http hands the
    // socket to an upgrade listener or, with none, closes it and emits no
    // error, so the request would wait for its time limit.
    req.once('upgrade', (_res: IncomingMessage, socket: { destroy(): void }) => {
      socket.destroy();
      fail(
        lostConnection(
          'the server switched protocols (101) on a request that asked for no upgrade',
        ),
      );
    });
    // Whatever else closes the request before an answer settled it: after
    // the answer's own events of this turn, so an answer that ended wins.
    req.once('close', () => {
      setImmediate(() => {
        settle(() => {
          if (answer?.complete === true) resolve(read(answer));
          else reject(lostConnection('the connection closed before an answer'));
        });
      });
    });
    signal.addEventListener('abort', onAbort, { once: true });
    req.end(body ?? undefined);
  });
}

/** Sends requests to one origin with one token. */
export class Transport {
  /** The origin requests go to. */
  readonly origin: URL;
  private readonly http: HttpModule;
  private agent: Agent | undefined;

  /**
   * @param baseUrl the server's origin.
   * @param token the bearer token.
   * @param timeoutMs one request's limit, answer body included.
   * @throws RangeError for a base URL that is not an http(s) origin or is
   *   on a port fetch refuses, or an empty token.
   */
  constructor(
    baseUrl: string,
    private readonly token: string,
    private readonly timeoutMs: number,
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
    // fetch refuses them too; the token is the credential, and a password
    // in a URL ends up in logs and process lists.
    if (origin.username !== '' || origin.password !== '') {
      throw new RangeError(
        'baseUrl must not carry a user name or password; the token is the credential',
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
    this.http =
      origin.protocol === 'https:'
        ? process.getBuiltinModule('node:https')
        : process.getBuiltinModule('node:http');
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
   * @throws the request's network error, a `TimeoutError` past the time
   *   limit, or the signal's reason when it aborts.
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
    if (body !== null) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(body));
    }
    if (key !== undefined) headers['idempotency-key'] = key;
    // The same keep-alive agent as Node.js's global one, of this transport
    // alone: the requests of a drain share its connections.
    // NODE_USE_ENV_PROXY=1 sends through HTTP_PROXY / HTTPS_PROXY (NO_PROXY
    // aside), as Node.js's global agent and its fetch do.
    this.agent ??= new this.http.Agent({
      keepAlive: true,
      scheduling: 'lifo',
      timeout: 5_000,
      ...(process.env['NODE_USE_ENV_PROXY'] === '1' ? { proxyEnv: process.env } : {}),
    });
    const res = await exchange(
      this.http,
      url,
      { method, headers, agent: this.agent },
      body,
      AbortSignal.any([signal, AbortSignal.timeout(this.timeoutMs)]),
    );
    const kept: Record<string, string> = {};
    for (const name of KEPT_HEADERS) {
      const value = header(res.headers, name);
      if (value !== null) kept[name] = value;
    }
    const marker = header(res.headers, 'idempotent-replay')?.trim().toLowerCase();
    return {
      oversize: res.oversize,
      status: res.status,
      replayed: marker === 'true',
      marked: marker === 'true' || marker === 'false',
      headers: kept,
      body: res.text,
      retryAfter: header(res.headers, 'retry-after'),
      serverTime: parseHttpDate(header(res.headers, 'date')),
      keyLifetimeMs: parseKeyLifetime(header(res.headers, KEY_LIFETIME_HEADER)),
      code: res.status >= 400 ? problemCode(res.text) : undefined,
    };
  }

  /** Closes the transport's idle connections; a later request opens new ones. */
  close(): void {
    this.agent?.destroy();
    this.agent = undefined;
  }
}

/**
 * The Fetch standard's "bad ports", which Node.js's fetch refuses to
 * connect to: the ports of other protocols (SMTP, SSH, X11, ...), never
 * this API. node:http would connect to them; the client refuses them
 * before anything is stated or sent, as a caller sending with fetch meets
 * them, instead of waiting for a server that is not there. A test checks
 * the list against fetch.
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
