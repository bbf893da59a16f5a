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

/**
 * Makes a pool to `url` through sockets the test holds.
 *
 * @param t the test; its teardown ends the pool.
 * @param url a single-host PostgreSQL URL.
 * @param max the pool's size; default 1.
 * @returns the pool and its reset.
 */
export function resettablePool(t: Test, url: string, max = 1): ResettablePool {
  const target = new URL(url);
  const sockets: net.Socket[] = [];
  const sql = createSql(url, {
    max,
    applicationName: 'reset-window',
    socket: () => {
      const socket = net.connect(Number(target.port), target.hostname);
      sockets.push(socket);
      return socket;
    },
  });
  t.teardown(() => sql.end({ timeout: 1 }));
  return {
    sql,
    reset: async (inWindow, index = sockets.length - 1) => {
      const socket = sockets[index];
      if (socket === undefined) throw new Error('the pool has not connected yet');
      // A destroyed socket would never close again: the wait below would hang.
      if (socket.destroyed) throw new Error(`socket ${String(index)} is closed already`);
      let thrown: Error | undefined;
      // Registered after the driver's own listener, so it runs right after
      // it; what it throws is rethrown below, not out of the emit.
      socket.once('error', () => {
        try {
          inWindow();
        } catch (err) {
          thrown = err instanceof Error ? err : new Error(String(err));
        }
      });
      const closed = new Promise((resolve) => socket.once('close', resolve));
      socket.destroy(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));
      await closed;
      if (thrown !== undefined) throw thrown;
    },
  };
}
