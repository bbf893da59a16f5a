/**
 * What the HTTP layer answers before there is a request to route, or when
 * the client is gone: Node.js's parser refusals and an unmet Expect as
 * problems written to the socket, and how a client that went away is told
 * from a server fault.
 */
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import { newId } from '../../kernel/ids/index.js';
import { problem, toProblemBody, type AppError } from '../../kernel/errs/index.js';
import { PROBLEM_CONTENT_TYPE } from './problem-reply.js';

/**
 * How many times a header appears in Node.js's flat raw header list.
 *
 * @param rawHeaders [name, value, name, value, ...].
 * @param name the header name, lower case.
 * @returns the count.
 */
export function countHeader(rawHeaders: readonly string[], name: string): number {
  let n = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) if (rawHeaders[i]?.toLowerCase() === name) n++;
  return n;
}

function framingProblem(detail: string, pointer: string, code: string): AppError {
  return problem('validation_failed', detail, { errors: [{ pointer, code }] });
}

/**
 * A Host value as RFC 9110 section 7.2 allows it: a registered name, an
 * IPv4 address or an IPv6 literal in brackets, then an optional port. A
 * comma is left out though RFC 3986 allows it in a name: a proxy may read
 * `a,b` as a list of two hosts.
 */
const HOST =
  /^(?:[A-Za-z0-9\-._~!$&'()*+;=]|%[0-9A-Fa-f]{2})+(?::\d*)?$|^\[[0-9A-Fa-f:.]+\](?::\d*)?$/;

/**
 * What this server refuses in a request's framing, before anything reads
 * it, because a proxy in front may read it otherwise (request smuggling,
 * routing by another Host): a version other than HTTP/1.x (Node.js's
 * parser takes `HTTP/2.0` as a request line), an HTTP/1.1 request without
 * `Host` or with two (Node.js keeps the first), and a `Transfer-Encoding`
 * other than `chunked` alone (Node.js reads `gzip, chunked` as plain
 * chunked bytes), or any in an HTTP/1.0 request. Run by the server's first
 * hooks and by its answer to a path the router cannot read.
 *
 * @param req the raw request.
 * @returns the problem to answer, or undefined when the framing is plain.
 */
export function framingRefusal(req: IncomingMessage): AppError | undefined {
  if (req.httpVersionMajor !== 1) {
    return framingProblem('The request is not well-formed HTTP/1.1.', '#', 'malformed_request');
  }
  const hosts = countHeader(req.rawHeaders, 'host');
  if (hosts === 0 && req.httpVersionMinor >= 1) {
    return framingProblem('An HTTP/1.1 request needs a Host header.', '#header/Host', 'required');
  }
  if (hosts > 1) {
    return framingProblem('Send one Host header, not several.', '#header/Host', 'duplicate');
  }
  const host = req.headers.host;
  if (host !== undefined && host !== '' && !HOST.test(host)) {
    // Node.js takes any value; a proxy in front may read `a@b` or `a, b`
    // as another host than this server does.
    return framingProblem('The Host header is not a host and port.', '#header/Host', 'invalid');
  }
  if (req.url?.includes('#') === true) {
    // A fragment never travels in a request (RFC 9112 section 3.2): a
    // target with one is malformed, and servers disagree on where it ends.
    return framingProblem('The request target holds a fragment (#).', '#path', 'invalid');
  }
  const coding = req.headers['transfer-encoding'];
  // HTTP/1.0 has no transfer codings: a 1.0 message that names one has
  // faulty framing (RFC 9112 section 6.1), a classic smuggling shape.
  if (
    coding !== undefined &&
    (coding.trim().toLowerCase() !== 'chunked' || req.httpVersionMinor === 0)
  ) {
    return framingProblem(
      'The only transfer coding this server reads is chunked, alone.',
      '#header/Transfer-Encoding',
      'unsupported',
    );
  }
  return undefined;
}

/**
 * Answers a `CONNECT` request (Node.js's `connect` event) with a `400
 * validation_failed` problem naming the method, and closes the connection:
 * this server opens no tunnels.
 *
 * @param _req the request.
 * @param socket the client's connection.
 */
export function connectRefusal(_req: IncomingMessage, socket: Duplex): void {
  const appError = framingProblem(
    'This server is no proxy: it opens no tunnels.',
    '#method',
    'unsupported',
  );
  writeRawProblem(socket, appError);
}

/** The methods {@link allowedMethods} asks the router about. */
const METHODS = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT'] as const;

/**
 * The methods the router answers for a URL, for the `Allow` header of a
 * `405 method_not_allowed`: empty when no route has the path (a 404).
 *
 * @param router the Fastify instance (its `findRoute`).
 * @param url the request URL as received (a query is ignored).
 * @param maxParamLength the router's longest path parameter (Fastify's `maxParamLength`).
 * @returns the methods, in alphabetical order.
 */
export function allowedMethods(
  router: { findRoute(options: { method: string; url: string }): unknown },
  url: string,
  maxParamLength: number,
): string[] {
  const path = url.split('?', 1)[0] ?? '';
  // The router reports a path parameter over its length limit as a match
  // (of its own refusal, not of the route), which that route would answer
  // with 400: a segment that long names no method to allow.
  if (path.split('/').some((segment) => segment.length > maxParamLength)) return [];
  return METHODS.filter((method) => router.findRoute({ method, url: path }) !== null);
}

/** A problem answered before routing: its body and a fresh correlation id. */
function rawProblem(appError: AppError): { id: string; body: string } {
  const id = newId();
  return { id, body: JSON.stringify(toProblemBody(appError, id)) };
}

/**
 * The problem for an error of Node.js's HTTP parser: 431 for a head over the
 * limit, 408 for a head or body that did not arrive in time (headersTimeout,
 * requestTimeout), 413 for oversized chunk extensions, 400 otherwise.
 *
 * @param code the parser's error code.
 * @returns the problem to answer.
 */
function parserRefusal(code: string | undefined) {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return problem('request_header_fields_too_large', 'The request head is too large.');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      // A slow client, not a malformed request: it may send it again.
      return problem('request_timeout', 'The request did not arrive in time.');
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return problem('payload_too_large', 'The chunk extensions are too large.');
    default:
      return problem('validation_failed', 'The request is not well-formed HTTP/1.1.', {
        errors: [{ pointer: '#', code: 'malformed_request' }],
      });
  }
}

/**
 * Answers what Node.js's HTTP parser refuses before any route runs (a
 * malformed head or body framing, a head over the size limit, a slow
 * client) with a problem,
 * like every other refusal, instead of Fastify's default
 * `{"error":"Bad Request",...}`. There is no request object yet: the answer
 * gets a fresh correlation id, and the connection is closed: ended, then
 * destroyed once the answer is flushed, even if the client keeps its side
 * open (the server allows half-open connections).
 *
 * @param err the parser's error.
 * @param socket the client's connection.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed || !socket.writable) return;
  // An earlier request on this connection, received whole, is still being
  // answered (this one's head stalled behind it, pipelined): bytes written
  // now would read as that request's answer. Close without a word. A body
  // that stalls is its own request's (not complete): that one gets its 408.
  const pending = (
    socket as Duplex & {
      _httpMessage?: { headersSent?: boolean; req?: { complete?: boolean } };
    }
  )._httpMessage;
  // Or that request was answered already (a framing refusal, before its
  // body): a second answer would read as the next request's.
  if (pending?.req?.complete === true || pending?.headersSent === true) {
    socket.destroy();
    return;
  }
  writeRawProblem(socket, parserRefusal(err.code));
}

/**
 * Writes a problem straight to a socket, with a fresh correlation id, and
 * closes the connection: ended, then destroyed once the answer is flushed,
 * even if the client keeps its side open (the server allows half-open
 * connections). Ending only our side would leave a file descriptor held,
 * and close() (the graceful shutdown) waiting on it.
 *
 * @param socket the client's connection.
 * @param appError the problem.
 */
function writeRawProblem(socket: Duplex, appError: AppError): void {
  // A socket handed over by Node.js (CONNECT) has lost the server's error
  // listener: a client that resets while the answer is written would crash
  // the process.
  socket.on('error', () => {
    socket.destroy();
  });
  const { id, body } = rawProblem(appError);
  socket.end(
    `HTTP/1.1 ${String(appError.status)} ${STATUS_CODES[appError.status] ?? ''}\r\n` +
      `content-type: ${PROBLEM_CONTENT_TYPE}\r\ncontent-length: ${String(Buffer.byteLength(body))}\r\n` +
      `correlation-id: ${id}\r\ncache-control: no-store\r\ndate: ${new Date().toUTCString()}\r\n` +
      `connection: close\r\n\r\n${body}`,
    () => {
      socket.destroy();
    },
  );
}

/**
 * Answers an `Expect` other than `100-continue` (Node.js's `checkExpectation`
 * event) with a `417 expectation_failed` problem, not Node.js's empty 417.
 *
 * @param _req the request.
 * @param res its response.
 */
export function unmetExpectationHandler(_req: IncomingMessage, res: ServerResponse): void {
  const { id, body } = rawProblem(
    problem('expectation_failed', 'This server meets no such expectation.'),
  );
  res.writeHead(417, {
    'content-type': PROBLEM_CONTENT_TYPE,
    'content-length': Buffer.byteLength(body),
    'correlation-id': id,
    'cache-control': 'no-store',
    connection: 'close',
  });
  res.end(body);
}

/**
 * Whether an error is the client going away while its request was read
 * (a reset or closed connection) rather than a server fault. Only the
 * request's own stream failing counts, never an error code alone: a
 * database connection reset is ECONNRESET too, and must stay a server
 * error, all the more when clients give up during an outage.
 *
 * @param error what the error handler got.
 * @param req the request.
 * @returns true when the client left.
 */
export function clientWentAway(error: unknown, req: FastifyRequest): boolean {
  if (typeof error !== 'object' || error === null) return false;
  if (req.raw.errored === error) return true;
  // The idempotency plugin's body pass-through reports a request that
  // closed before its body ended with this code (raw-body.ts).
  return (
    (error as { code?: unknown }).code === 'ERR_STREAM_PREMATURE_CLOSE' &&
    req.raw.destroyed &&
    !req.raw.complete
  );
}
