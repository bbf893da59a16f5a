/**
 * What one client may cost the HTTP listener: how long it may take to send
 * a request, how long an idle connection stays, how many connections a
 * process holds, how many pipelined requests one connection may have
 * waiting. Applied to Node.js's server before it listens, from the
 * `http.*` configuration keys.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
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
  closeInactiveConnections(server, limits.socketTimeoutMs);
}

/** Bytes of a socket's writes its system has not taken yet (libuv's queue). */
function queuedBytes(socket: Socket): number {
  return (socket as { _handle?: { writeQueueSize?: number } | null })._handle?.writeQueueSize ?? 0;
}

/**
 * Whether an answer is in progress on the connection. Between requests
 * Node.js's own timeouts decide (`http.keep_alive_timeout` may be set above
 * this one), and they are not the ones that skip.
 */
function answering(socket: Socket): boolean {
  return (socket as { _httpMessage?: unknown })._httpMessage != null;
}

/**
 * Destroys a connection with an answer in progress once no byte went
 * either way for `timeoutMs`, counted from the last byte. Node.js's own socket timeout skips its first
 * expiry when the connection's queued write changed since it was made, so
 * a client that asked for large answers and stopped reading held its
 * descriptors for twice the timeout (180 s against 90 s). Progress
 * here is what the system took: bytes read, bytes handed to the socket,
 * the queue of writes shrinking. Checked on one timer for all connections,
 * a quarter of the timeout apart (at most a second), so a connection goes
 * at most that much after its timeout.
 *
 * @param server Node.js's HTTP server, before listen.
 * @param timeoutMs inactivity allowed (`http.socket_timeout`); 0 turns it off.
 */
export function closeInactiveConnections(server: Server, timeoutMs: number): void {
  if (timeoutMs <= 0) return;
  const seen = new Map<Socket, { read: number; written: number; queued: number; since: number }>();
  server.on('connection', (socket: Socket) => {
    seen.set(socket, {
      read: socket.bytesRead,
      written: socket.bytesWritten,
      queued: queuedBytes(socket),
      since: performance.now(),
    });
    socket.once('close', () => seen.delete(socket));
  });
  const every = Math.max(50, Math.min(1000, Math.floor(timeoutMs / 4)));
  const timer = setInterval(() => {
    const now = performance.now();
    for (const [socket, last] of seen) {
      const read = socket.bytesRead;
      const written = socket.bytesWritten;
      const queued = queuedBytes(socket);
      if (read !== last.read || written !== last.written || queued !== last.queued) {
        last.read = read;
        last.written = written;
        last.queued = queued;
        last.since = now;
      } else if (now - last.since >= timeoutMs && answering(socket)) {
        socket.destroy();
      }
    }
  }, every);
  timer.unref();
  server.once('close', () => {
    clearInterval(timer);
  });
}

/** What {@link guardPipelinedReads} tells of a connection it closed. */
export interface PipeliningClose {
  /** The connection, already destroyed. */
  readonly socket: Socket;
  /** Requests awaiting answers on it when another one arrived. */
  readonly waiting: number;
}

/**
 * What a connection closed in the middle of its request body may still send
 * before it is cut: bytes read and thrown away, unparsed, after the answer.
 */
export const LINGER_BYTES = 16 * 2 ** 20;
/** How long such a connection is read from at most, in milliseconds. */
export const LINGER_MS = 5000;

/** Connections to close by a lingering close, their budget of bytes left. */
const lingering = new WeakMap<Socket, { left: number }>();

/**
 * Makes the close that follows this connection's answer a lingering close.
 * A client still writing its body when the server answers (a 413 for a
 * body over the limit) and closes at once gets a reset: its system drops
 * the answer it had received, and the client sees only a write error
 * (EPIPE) and retries blindly. So the answer is sent, the server's side
 * is shut (FIN), and what the client still sends is read and thrown away,
 * never parsed, up to {@link LINGER_BYTES} or for {@link LINGER_MS}
 * (whichever comes first), until the client closes. Needs the connection
 * to be read through {@link guardPipelinedReads}; elsewhere Node.js's own
 * close stands.
 *
 * @param socket the connection whose answer says `Connection: close`.
 */
export function lingerOnClose(socket: Socket): void {
  if (lingering.has(socket) || socket.destroyed) return;
  const budget = { left: LINGER_BYTES };
  // Node.js ends a connection whose answer said close by destroySoon once
  // the answer is written; this one only shuts its side then.
  socket.destroySoon = function destroySoonLingering(this: Socket) {
    lingering.set(socket, budget);
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    timer.unref();
    socket.once('close', () => {
      clearTimeout(timer);
    });
    // The client closing its side ends it at once.
    socket.once('end', () => socket.destroy());
    socket.end();
  };
}

/** Thrown from the request event to stop Node.js's parser in mid-chunk. */
class OverPipeliningLimit extends Error {}

/**
 * Bounds what a connection's pipelined requests cost before Node.js builds
 * anything for the requests over the limit. Node.js's parser reads a
 * connection in chunks of up to 64 KiB and parses every request in a chunk
 * at once, building a request and an answer object for each (and Fastify
 * its own on top), even once the connection is closed: 1,000 connections
 * each writing 400 requests made the process hold 300 to 500 MiB more.
 * Here the chunk is handed to the parser by this guard, and when a request
 * arrives while `max` await their answers, the request event throws before
 * any other listener sees it: the parser stops where it is, the rest of the
 * chunk is never parsed, and the connection is closed. So a connection
 * costs at most `max + 1` parsed requests and one chunk read from it; the
 * parser alone tells heads from bodies, so an honest body is never
 * mistaken for a request and costs nothing more to read.
 *
 * It relies on how Node.js's HTTP server reads a connection: one `data`
 * listener of its own, installed before the server's `connection` event
 * reaches this one, the parser on `socket.parser`, and an exception from a
 * parser callback coming back out of the listener's call. A listener added
 * here makes Node.js read through JavaScript instead of its native path
 * (what it does for any `data` listener). On a Node.js that reads
 * otherwise, nothing is changed and {@link pipeliningGuard} alone bounds
 * what runs.
 *
 * @param server Node.js's HTTP server (Fastify's `app.server`), before listen.
 * @param max requests per connection awaiting answers (`http.max_pipelined_requests`).
 * @param onClose told once for each connection closed this way.
 */
export function guardPipelinedReads(
  server: Server,
  max: number,
  onClose: (closed: PipeliningClose) => void,
): void {
  const lines = new WeakMap<Socket, { waiting: number; parsing: boolean }>();
  // First of the request listeners, so the count is right, and a request
  // over the limit refused, before Fastify (or anything) sees it.
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const line = lines.get(req.socket);
    if (line === undefined) return;
    // Only inside this guard's own call of the parser, which catches it;
    // anywhere else the onRequest hook refuses it.
    if (line.waiting >= max && line.parsing) throw new OverPipeliningLimit();
    line.waiting++;
    res.once('close', () => {
      line.waiting--;
    });
  });
  server.on('connection', (socket: Socket) => {
    const parser = (socket as { parser?: unknown }).parser;
    const listeners = socket.listeners('data');
    const parse = listeners[0] as ((chunk: Buffer) => void) | undefined;
    if (parser == null || parse === undefined || listeners.length !== 1) return;
    const line = { waiting: 0, parsing: false };
    lines.set(socket, line);
    socket.removeListener('data', parse);
    socket.on('data', (chunk: Buffer) => {
      const linger = lingering.get(socket);
      if (linger !== undefined) {
        linger.left -= chunk.length;
        if (linger.left < 0) socket.destroy();
        return;
      }
      line.parsing = true;
      try {
        parse(chunk);
      } catch (err) {
        if (!(err instanceof OverPipeliningLimit)) throw err;
        const waiting = line.waiting;
        socket.destroy();
        onClose({ socket, waiting });
      } finally {
        line.parsing = false;
      }
    });
  });
}

/**
 * An onRequest hook that bounds HTTP/1.1 pipelining: how many requests one
 * connection may have waiting for their answers at once. Node.js parses
 * every request in a chunk it reads and dispatches them all before it
 * pauses a connection whose answers pile up, so a client that writes
 * hundreds of requests at once and never reads made the process hold
 * hundreds of answers per connection (measured: 752 MB of heap for 40
 * connections). The request over the limit is not
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
      // Once per connection: the requests after this one find it closed.
      if (!socket.destroyed) {
        req.log.info({ waiting: line.waiting }, 'pipelining limit: connection closed');
      }
      // Fastify runs no further hook, handler or answer for a hijacked reply.
      reply.hijack();
      socket.destroy();
      done();
      return;
    }
    // One request at a time per connection, as HTTP/1.1 answers them in
    // order anyway: a later one waits until the earlier answer is sent, so
    // a connection holds one answer (one file stream, one descriptor), not
    // one per pipelined request (a client pipelining 16 static files and
    // never reading would hold 16 descriptors).
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
    // A connection closed (the client left, or sent more than the limit),
    // or whose server side is shut (an answer that said close finished, a
    // lingering close after a 413 still reads, the client's FIN was
    // answered): nobody can read an answer, so the request is not run,
    // whether it waited its turn or came first.
    const unanswerable = () => socket.destroyed || socket.writableEnded;
    if (first) {
      if (unanswerable()) reply.hijack();
      done();
    } else
      void before.then(() => {
        if (unanswerable()) reply.hijack();
        done();
      });
  };
}
