/**
 * The sockets our pools' connections run on: a socket's error reaches
 * postgres.js together with its close, never before it.
 *
 * Node.js emits a socket's `close` after its `error` (a reset, ECONNRESET),
 * in the close phase of the event loop; the rest of the poll phase, other
 * sockets' reads, `setImmediate` callbacks and their microtasks run in
 * between. postgres.js 3.4.9 rejects what the connection has in flight on
 * the error but goes on routing statements to it until the close, and on a
 * close with an error it rejects nothing more. A statement made in between
 * is kept across the reconnect: settled by the next session's start-up
 * answer (an empty result, "no rows"), or made the next session's current
 * query, which PostgreSQL never received, so the connection never serves
 * again (docs/DECISIONS.md, "A statement the driver kept across a reset").
 *
 * Held back to the close, the error finds every statement routed to the
 * connection meanwhile in flight on it (each was written to the dead
 * socket, where it went nowhere) and rejects them all; the close then
 * moves the connection out of the pool's way at once.
 */
import net from 'node:net';

/** What postgres.js hands its `socket` factory, as far as this module reads it. */
export interface SocketTarget {
  /** The URL's hosts, in its order. */
  readonly host: readonly string[];
  /** Their ports, one per host. */
  readonly port: readonly number[];
  /** A Unix-domain socket's path, if the URL names one. */
  readonly path?: string | false | undefined;
  /** Whether the connection negotiates TLS (false, or a mode or options). */
  readonly ssl?: unknown;
}

/**
 * Makes a socket tell its error only with its close: an error emitted once
 * the socket is destroyed (its close is then sure to follow) is held, and
 * emitted right before the close, in the same turn. An error of a socket
 * still open goes through at once.
 *
 * @param socket a socket no listener has been added to yet.
 * @returns the same socket.
 */
export function erroredWithItsClose<S extends net.Socket>(socket: S): S {
  const emit = socket.emit.bind(socket) as (event: string | symbol, ...args: unknown[]) => boolean;
  let held: { readonly error: unknown } | undefined;
  socket.emit = ((event: string | symbol, ...args: unknown[]): boolean => {
    if (event === 'error' && socket.destroyed) {
      held ??= { error: args[0] };
      return true;
    }
    if (event === 'close' && held !== undefined) {
      const { error } = held;
      held = undefined;
      // Emitting an error nobody listens to would throw out of the close;
      // and a listener that throws must not keep the close from the driver.
      try {
        if (socket.listenerCount('error') > 0) emit('error', error);
      } finally {
        emit(event, ...args);
      }
      return true;
    }
    return emit(event, ...args);
  }) as S['emit'];
  return socket;
}

/**
 * The `socket` factory of a pool (postgres.js's option of that name): each
 * connection's socket, connecting already, its error told with its close
 * ({@link erroredWithItsClose}).
 *
 * With a factory the driver no longer picks the host of a host list, so
 * the factory does: every socket goes to the host the pool's last good
 * socket went to, starting at the first of the list, and a socket's close
 * moves the pool on to the next host when it still points at that
 * socket's. A host that refuses, times out, or is not what
 * `target_session_attrs` asks for (the driver ends that session and opens
 * another) is left after one try, as the driver's own order does; a pool
 * that reaches the primary stays on it. A routine close of a connection to
 * the primary moves the pool on too, and costs the next connection one try
 * of the next host before it comes back.
 *
 * A connection that negotiates TLS gets its plain socket without the hold:
 * the driver lays TLS over it and listens to the TLS socket, not to this
 * one. Those pools keep the driver's window between a reset and its close,
 * behind the checks of their results (platform/pg/observed.ts).
 *
 * @param make makes the socket instead, already connecting to the host and
 *   port given (tests that reset a connection at a chosen moment,
 *   test/harness/reset-window.ts).
 * @returns the factory.
 */
export function poolSockets(
  make?: (host: string, port: number) => net.Socket,
): (target: SocketTarget) => net.Socket {
  // The host of the list the pool's sockets go to; shared by its connections.
  let current = 0;
  return (target) => {
    if (typeof target.path === 'string' && target.path !== '') {
      return erroredWithItsClose(net.connect(target.path));
    }
    const count = Math.max(1, target.host.length);
    const index = current % count;
    const host = target.host[index] ?? 'localhost';
    const port = target.port[index] ?? target.port[0] ?? 5432;
    // The driver names the host and port in its connection errors.
    const socket = Object.assign(make === undefined ? net.connect(port, host) : make(host, port), {
      host,
      port,
    });
    if (count > 1) {
      socket.once('close', () => {
        if (current % count === index) current = index + 1;
      });
    }
    return target.ssl !== false && target.ssl !== undefined ? socket : erroredWithItsClose(socket);
  };
}
