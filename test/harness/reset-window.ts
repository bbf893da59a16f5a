/**
 * A postgres.js pool whose sockets a test can reset, with a hook that runs
 * in the window a reset opens: after the socket's `error` (ECONNRESET) has
 * reached the driver and before its `close` has. Node.js emits the close
 * only once the handle is closed, in the close phase of the event loop, so
 * whatever runs between (the rest of the poll phase, where other sockets'
 * data is read and requests are served, `setImmediate` callbacks, the
 * microtasks of each) may make statements in that window; the hook makes
 * one there on purpose. Sockets are counted in the order the pool opens
 * them (a cancel request of the driver would open one too).
 */
import net from 'node:net';
import postgres from 'postgres';
import type { Test } from 'tap';
import { createSql, type Sql } from '../../platform/pg/client.js';

/** A pool over sockets the test can reset. */
export interface ResettablePool {
  /** The pool, ended at the test's teardown. */
  readonly sql: Sql;
  /**
   * Resets a socket of the pool as a peer's RST would, and calls
   * `inWindow` right after the driver has heard the error, before it hears
   * the close.
   *
   * @param inWindow makes the statements the window should see.
   * @param index which socket, in the order the pool opened them; default
   *   the last one opened.
   * @returns once the socket has closed.
   */
  readonly reset: (inWindow: () => void, index?: number) => Promise<void>;
}

/** Whether a hostList pool's patch of `net.Socket.prototype.connect` is in place. */
let hostListPatched = false;

/**
 * Makes a pool to `url` through sockets the test holds.
 *
 * @param t the test; its teardown ends the pool.
 * @param url a single-host PostgreSQL URL.
 * @param max the pool's size; default 1.
 * @param options `bare`: a pool of postgres.js itself, which hears a
 *   socket's error before its close (the driver's own behaviour, and what
 *   a pool over TLS still has, platform/pg/socket.ts); `hostList`: a pool
 *   of createSql over a host list that names the server twice, left to
 *   make its sockets itself, which are found as they connect (every socket
 *   of this process that connects to the server's port while the pool
 *   lives, so the test must open no other connection meanwhile; one such
 *   pool at a time); by default a pool of createSql.
 * @returns the pool and its reset.
 */
export function resettablePool(
  t: Test,
  url: string,
  max = 1,
  options: { readonly bare?: boolean; readonly hostList?: boolean } = {},
): ResettablePool {
  const target = new URL(url);
  const sockets: net.Socket[] = [];
  const socket = (): net.Socket => {
    const made = net.connect(Number(target.port), target.hostname);
    sockets.push(made);
    return made;
  };
  let sql: Sql;
  if (options.hostList === true) {
    // One at a time: a second patch over the first would be restored in
    // the wrong order and outlive its test.
    if (hostListPatched) throw new Error('one hostList pool at a time');
    hostListPatched = true;
    // Whoever makes the socket (the driver or the pool's factory), it
    // connects through this method once.
    const proto = net.Socket.prototype as unknown as {
      connect: (this: net.Socket, ...args: unknown[]) => net.Socket;
    };
    const connect = proto.connect;
    const port = Number(target.port);
    proto.connect = function (this: net.Socket, ...args: unknown[]) {
      // net.connect passes its arguments normalised, as an array whose
      // first item holds the port; a socket made bare is given the port.
      const [first] = args;
      const options: unknown = Array.isArray(first) ? first[0] : first;
      const to =
        typeof options === 'object' && options !== null
          ? (options as { port?: unknown }).port
          : options;
      if (Number(to) === port && !sockets.includes(this)) sockets.push(this);
      return connect.apply(this, args);
    };
    t.teardown(() => {
      proto.connect = connect;
      hostListPatched = false;
    });
    const auth = `${target.username}:${target.password}@`;
    const list = `${target.protocol}//${auth}${target.host},${target.host}${target.pathname}${target.search}`;
    sql = createSql(list, { max, applicationName: 'reset-window-hosts' });
  } else if (options.bare === true) {
    sql = postgres(url, { max, connection: { application_name: 'reset-window' }, ...{ socket } });
  } else {
    sql = createSql(url, { max, applicationName: 'reset-window', socket });
  }
  t.teardown(() => sql.end({ timeout: 1 }));
  return {
    sql,
    reset: async (inWindow, index = sockets.length - 1) => {
      const socket = sockets[index];
      if (socket === undefined) throw new Error('the pool has not connected yet');
      // A destroyed socket would never close again: the wait below would hang.
      if (socket.destroyed) throw new Error(`socket ${String(index)} is closed already`);
      let thrown: Error | undefined;
      const closed = new Promise((resolve) => socket.once('close', resolve));
      socket.destroy(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));
      // The destroy queued the socket's error in a tick of its own; this
      // tick runs right after it, and the close comes only in the close
      // phase of the event loop. So the window opens here whether or not
      // the error has reached the driver yet (the pool may hold it back to
      // the close, see platform/pg/socket.ts). What it throws is rethrown
      // below, not out of the tick.
      process.nextTick(() => {
        try {
          inWindow();
        } catch (err) {
          thrown = err instanceof Error ? err : new Error(String(err));
        }
      });
      await closed;
      if (thrown !== undefined) throw thrown;
    },
  };
}
