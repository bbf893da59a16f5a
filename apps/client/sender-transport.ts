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
import { problemCode } from './sender-lines.js';
import { parseOrigin } from './sender-origin.js';

// Through process.getBuiltinModule, as the module comment says of node:http:
// an ES import of node:crypto loads webcrypto too (docs/DECISIONS.md).
const { createHash, randomBytes } = process.getBuiltinModule('node:crypto');

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
 * The W3C `traceparent` of one attempt of an intent: its trace id is the
 * first 16 bytes of the SHA-256 of the intent's key, so every attempt of
 * the intent (after a crash and a restart too: the outbox keeps the key)
 * is in one trace, and the key itself is not in it; its span id is fresh
 * per attempt; sampled, so a server that traces keeps the whole intent.
 *
 * @param key the intent's Idempotency-Key.
 * @returns the header's value, `00-<trace id>-<span id>-01`.
 */
export function traceparentOf(key: string): string {
  const traceId = createHash('sha256').update(key).digest('hex').slice(0, 32);
  let spanId = randomBytes(8).toString('hex');
  // All zeros is not a valid span id (one in 2^64).
  while (/^0+$/.test(spanId)) spanId = randomBytes(8).toString('hex');
  // Nor is an all-zero trace id; a SHA-256 prefix of 128 zero bits is not
  // found by chance.
  return `00-${traceId}-${spanId}-01`;
}

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
    const origin = parseOrigin(baseUrl);
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
    if (key !== undefined) {
      headers['idempotency-key'] = key;
      headers['traceparent'] = traceparentOf(key);
    }
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
