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
 * Whether a connection URL lists several hosts
 * (`postgres://u:p@h1:5432,h2:5432/db?target_session_attrs=read-write`): the
 * authority after its last `@` holds a comma, as postgres.js reads it
 * (platform/pg/database.ts, `parsePostgresUrl`, validates the list).
 *
 * @param url a postgres:// URL.
 * @returns true for a host list.
 */
export function namesSeveralHosts(url: string): boolean {
  const start = /^[a-z][a-z0-9+.-]*:\/\//i.exec(url)?.[0].length ?? 0;
  const rest = url.slice(start);
  const end = rest.search(/[/?#]/);
  const authority = end === -1 ? rest : rest.slice(0, end);
  return authority.slice(authority.lastIndexOf('@') + 1).includes(',');
}

/**
 * The `socket` factory of a pool over one host (postgres.js's option of
 * that name): each connection's socket, connecting already, its error told
 * with its close ({@link erroredWithItsClose}).
 *
 * A pool over a host list is left to the driver's own sockets
 * (`createSql` gives it no factory): with a factory the driver no longer
 * picks the host, and its choice is what `target_session_attrs` leans on.
 * Each connection starts at the first host and moves to the next on each
 * attempt, skipping a standby (createSql asks for the primary when the URL
 * asks for `read-write`). A connection that negotiates TLS gets its plain socket without the
 * hold: the driver lays TLS over it and listens to the TLS socket, not to
 * this one. Those pools keep the driver's window between a reset and its
 * close, behind the checks of their results (platform/pg/observed.ts).
 *
 * @param make makes the socket instead, already connecting (tests that
 *   reset a connection at a chosen moment, test/harness/reset-window.ts).
 * @returns the factory.
 */
export function poolSockets(make?: () => net.Socket): (target: SocketTarget) => net.Socket {
  return (target) => {
    if (make !== undefined) return erroredWithItsClose(make());
    if (typeof target.path === 'string' && target.path !== '') {
      return erroredWithItsClose(net.connect(target.path));
    }
    const host = target.host[0] ?? 'localhost';
    const port = target.port[0] ?? 5432;
    // The driver names the host and port in its connection errors.
    const socket = Object.assign(net.connect(port, host), { host, port });
    return target.ssl !== false && target.ssl !== undefined ? socket : erroredWithItsClose(socket);
  };
}
