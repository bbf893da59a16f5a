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

/** Options of {@link poolSockets}. */
export interface PoolSocketOptions {
  /**
   * Makes the socket instead, already connecting to the host and port
   * given (tests that reset a connection at a chosen moment,
   * test/harness/reset-window.ts).
   */
  readonly make?: (host: string, port: number) => net.Socket;
  /**
   * How long the n-th socket (from 0) waits before it is made once every
   * host of a list has failed since the last socket that settled, in
   * milliseconds. Default: none waits.
   */
  readonly backoffMs?: (attempt: number) => number;
  /**
   * How long a socket must stay open after it connected to count as a
   * host that serves (default 1,000 ms): a standby the driver refuses, a
   * server that ends the session at start-up, closes well within it.
   */
  readonly settleMs?: number;
  /**
   * Whether the pool was ended: a socket whose wait ends after that is
   * not made (the factory rejects), so no session opens on an ended pool.
   */
  readonly ended?: () => boolean;
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
 * The driver opens the next session of a connection as soon as the last
 * one closed while a statement waits for it, with no pause: over a host
 * list where no host is what it asks for (every node a standby during a
 * failover), that is a loop of start-ups as fast as the servers answer.
 * So once every host of the list has failed since the last socket that
 * settled, the next socket is made only after `backoffMs` (the driver
 * awaits a factory that returns a promise; its connect timeout starts
 * once the socket is made). Nothing is held on a socket that exists: its
 * error and its close reach the driver as they would without this.
 *
 * A connection that negotiates TLS gets its plain socket without the
 * error's hold: the driver lays TLS over it and listens to the TLS socket,
 * not to this one. Those pools keep the driver's window between a reset
 * and its close, behind the checks of their results
 * (platform/pg/observed.ts). The host's order and the pacing still work
 * there: they watch the socket's own emit, which the driver's removal of
 * every listener before TLS does not touch.
 *
 * @param options the socket maker for tests, the pacing, the settle time
 *   and the pool's end.
 * @returns the factory: a socket, or a promise of one while the tries are
 *   paced (rejected when the pool ended meanwhile).
 */
export function poolSockets(
  options: PoolSocketOptions = {},
): (target: SocketTarget) => net.Socket | Promise<net.Socket> {
  const settleMs = options.settleMs ?? 1_000;
  // The host of the list the pool's sockets go to; shared by its connections.
  let current = 0;
  // Hosts whose last socket closed before it settled, and the sockets
  // that waited since every host is in it.
  const failed = new Set<number>();
  let paced = 0;

  const made = (target: SocketTarget): net.Socket => {
    const count = Math.max(1, target.host.length);
    const index = current % count;
    const host = target.host[index] ?? 'localhost';
    const port = target.port[index] ?? target.port[0] ?? 5432;
    const plain = options.make === undefined ? net.connect(port, host) : options.make(host, port);
    // The driver names the host and port in its connection errors.
    Object.assign(plain, { host, port });
    const socket =
      target.ssl !== false && target.ssl !== undefined ? plain : erroredWithItsClose(plain);
    if (count === 1) return socket;
    // Told by the socket's own emit, not a listener: the driver removes
    // every listener of a socket it lays TLS over.
    const emit = socket.emit.bind(socket) as (
      event: string | symbol,
      ...args: unknown[]
    ) => boolean;
    let settle: NodeJS.Timeout | undefined;
    let settled = false;
    socket.emit = ((event: string | symbol, ...args: unknown[]): boolean => {
      if (event === 'connect' && settle === undefined) {
        settle = setTimeout(() => {
          settled = true;
          failed.clear();
          paced = 0;
        }, settleMs);
        settle.unref();
      } else if (event === 'close') {
        clearTimeout(settle);
        if (current % count === index) current = index + 1;
        if (!settled) failed.add(index);
      }
      return emit(event, ...args);
    }) as typeof socket.emit;
    return socket;
  };

  return (target) => {
    if (typeof target.path === 'string' && target.path !== '') {
      return erroredWithItsClose(net.connect(target.path));
    }
    const count = Math.max(1, target.host.length);
    const wait = count > 1 && failed.size >= count ? (options.backoffMs?.(paced++) ?? 0) : 0;
    if (wait <= 0) return made(target);
    return new Promise<net.Socket>((resolve, reject) => {
      setTimeout(() => {
        if (options.ended?.() === true) reject(new Error('the pool has ended'));
        else resolve(made(target));
      }, wait);
    });
  };
}
