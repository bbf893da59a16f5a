/**
 * What one client may cost the HTTP listener: how long it may take to send
 * a request, how long an idle connection stays, how many connections a
 * process holds, how many pipelined requests one connection may have
 * waiting. Applied to Node.js's server before it listens, from the
 * `http.*` configuration keys.
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { onRequestHookHandler } from 'fastify';

/** The limits, in milliseconds and counts. */
export interface ConnectionLimits {
  /** A whole request, head and body (`http.request_timeout`): 408 after it. */
  readonly requestTimeoutMs: number;
  /** The head of a request (`http.headers_timeout`), at most the above: 408 after it. */
  readonly headersTimeoutMs: number;
  /** An idle keep-alive connection (`http.keep_alive_timeout`). */
  readonly keepAliveTimeoutMs: number;
  /** Connections held at once (`http.max_connections`); more are closed when accepted. */
  readonly maxConnections: number;
  /**
   * Inactivity of a connection, a request in progress included
   * (`http.socket_timeout`): a client that stops reading is closed after it.
   */
  readonly socketTimeoutMs: number;
}

/**
 * Applies the limits to a server that does not listen yet. Node.js checks
 * the request and head timeouts on an interval (30 s by default, which
 * would let a stalled body hold its socket up to twice its limit): the
 * interval is set to a quarter of the head timeout, at most a second.
 *
 * @param server Node.js's HTTP server (Fastify's `app.server`), before listen.
 * @param limits the limits.
 */
export function applyConnectionLimits(server: Server, limits: ConnectionLimits): void {
  server.requestTimeout = limits.requestTimeoutMs;
  // Node.js requires the head's limit to be within the whole request's.
  server.headersTimeout = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs);
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.maxConnections = limits.maxConnections;
  // Node.js destroys a socket that saw no byte either way for this long
  // (server.timeout): nothing else frees an answer a client never reads.
  server.timeout = limits.socketTimeoutMs;
  (server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval =
    Math.max(50, Math.min(1000, Math.floor(server.headersTimeout / 4)));
}

/**
 * An onRequest hook that bounds HTTP/1.1 pipelining: how many requests one
 * connection may have waiting for their answers at once. Node.js parses
 * every request in a chunk it reads and dispatches them all before it
 * pauses a connection whose answers pile up, so a client that writes
 * hundreds of requests at once and never reads made the process hold
 * hundreds of answers per connection (the hostile-client review measured
 * 752 MB of heap for 40 connections). The request over the limit is not
 * run: the connection is closed without an answer, which is all HTTP
 * allows once earlier answers are owed on it. Requests within the limit
 * run one after another, each once the answer before it was sent.
 *
 * @param max requests per connection awaiting answers (`http.max_pipelined_requests`).
 * @returns the hook, to be the server's first.
 */
export function pipeliningGuard(max: number): onRequestHookHandler {
  const lines = new WeakMap<Socket, { waiting: number; last: Promise<undefined> }>();
  return (req, reply, done) => {
    const socket = req.raw.socket;
    let line = lines.get(socket);
    if (line === undefined) {
      line = { waiting: 0, last: Promise.resolve(undefined) };
      lines.set(socket, line);
    }
    if (line.waiting + 1 > max) {
      req.log.info({ waiting: line.waiting }, 'pipelining limit: connection closed');
      // Fastify runs no further hook, handler or answer for a hijacked reply.
      reply.hijack();
      socket.destroy();
      done();
      return;
    }
    // One request at a time per connection, as HTTP/1.1 answers them in
    // order anyway: a later one waits until the earlier answer is sent, so
    // a connection holds one answer (one file stream, one descriptor), not
    // one per pipelined request (review: 16 static files each, never read).
    const first = line.waiting === 0;
    line.waiting++;
    const before = line.last;
    const { promise: finished, resolve } = Promise.withResolvers<undefined>();
    line.last = finished;
    const current = line;
    reply.raw.once('close', () => {
      current.waiting--;
      resolve(undefined);
    });
    if (first) done();
    else
      void before.then(() => {
        done();
      });
  };
}
