/**
 * A small TCP forwarder on 127.0.0.1: one address that follows the primary,
 * as a virtual IP or a proxy driven by health checks does in a real
 * deployment. Clients connect to the forwarder's port; each connection is
 * relayed byte for byte to the current target port. A switch drops every
 * relayed connection (a client must never keep talking to the old primary
 * through it) and sends new ones to the new target.
 *
 * It also cuts connections on demand, the way networks and servers fail:
 * {@link Forwarder.arm} waits for a chunk that matches a pattern and then
 * resets, closes, half-opens, black-holes or terminates that one
 * connection, before or after relaying the chunk, or after relaying the
 * answer to it. The fault tests of the unit of work use it to cut a
 * PostgreSQL connection at a chosen point of a transaction.
 */
import net from 'node:net';

/**
 * How a connection is cut.
 *
 * - `rst`: both sides reset (ECONNRESET on the client).
 * - `fin`: both sides closed in order.
 * - `half_open`: the server side reset, the client side kept open and
 *   silent (the client hears nothing, as behind a dead peer).
 * - `black_hole`: both sockets kept open, every byte dropped, until either
 *   side closes its socket (a timeout of the server or of the client).
 * - `terminate`: the {@link ForwarderOptions.terminate} hook is called with
 *   the server side's local port (the server's `client_port`), as an
 *   operator's `pg_terminate_backend` would, and relaying goes on.
 */
export type CutWay = 'rst' | 'fin' | 'half_open' | 'black_hole' | 'terminate';

/** Every {@link CutWay}, for random choice. */
export const CUT_WAYS: readonly CutWay[] = ['rst', 'fin', 'half_open', 'black_hole', 'terminate'];

/**
 * When, around the matched client chunk, the cut happens.
 *
 * - `before`: the chunk is not relayed.
 * - `after`: the chunk is relayed, its answer is not.
 * - `after_answer`: the chunk and the first server chunk after it are
 *   relayed, then the cut.
 */
export type CutWhen = 'before' | 'after' | 'after_answer';

/** One cut waiting for its chunk. */
export interface Trigger {
  /** Matched against each client chunk read as latin1. */
  readonly match: RegExp;
  readonly when: CutWhen;
  readonly way: CutWay;
}

/** A running forwarder. */
export interface Forwarder {
  /** The port clients connect to. */
  readonly port: number;
  /** The port new connections are relayed to. */
  readonly target: number;
  /**
   * Sends new connections to another port and drops every connection
   * relayed so far.
   *
   * @param port the new target port on 127.0.0.1.
   * @throws RangeError when the port is not 1 to 65535 (the target is kept).
   */
  switchTo(port: number): void;
  /**
   * Drops every relayed connection with a TCP reset towards the client (its
   * socket fails with ECONNRESET before it closes), keeping the target.
   */
  reset(): void;
  /** How many client connections are relayed right now. */
  connections(): number;
  /**
   * How many chunks the clients have sent so far, all connections together:
   * on loopback each write a client makes arrives as one chunk, so for a
   * client that waits for its answers this counts its round trips.
   */
  clientChunks(): number;
  /**
   * Arms a cut: the first client chunk of a connection not cut yet that
   * matches fires it, once.
   *
   * @param trigger the pattern, the moment and the way.
   * @returns a handle: `fired` resolves when the cut happened, `disarm`
   *   takes it back if it has not.
   */
  arm(trigger: Trigger): { readonly fired: Promise<void>; disarm(): boolean };
  /** Takes back every armed cut that has not fired; returns how many. */
  disarmAll(): number;
  /**
   * Closes the connections a `half_open` or `black_hole` cut left silent,
   * as the operating system does in the end with a peer that vanished (its
   * keepalive or retransmission timeout), so the client hears the close.
   *
   * @param cutBy which of them: those whose cut's trigger it accepts (all
   *   when absent).
   * @returns how many were closed.
   */
  dropSilent(cutBy?: (trigger: Trigger) => boolean): number;
  /** Stops listening and drops every connection. Safe to call twice. */
  close(): Promise<void>;
}

/** Options of {@link startForwarder}. */
export interface ForwarderOptions {
  /**
   * Called for a `terminate` cut with the server side's local port; ends the
   * server's session (for PostgreSQL: `pg_terminate_backend` of the backend
   * whose `client_port` it is). Required for that way.
   */
  readonly terminate?: (clientPort: number) => Promise<void>;
  /**
   * Called with every chunk a client writes, before it is relayed: for a
   * test that looks at what was sent (the statement values in a Bind).
   */
  readonly onClientData?: (chunk: Buffer) => void;
}

function assertPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RangeError(`forwarder target port must be an integer from 1 to 65535, got ${port}`);
  }
}

interface Armed {
  readonly trigger: Trigger;
  readonly fire: () => void;
}

interface Pair {
  readonly client: net.Socket;
  readonly upstream: net.Socket;
  /** Bytes are no longer relayed in either direction. */
  silent: boolean;
  /** A cut was taken by this connection (each connection is cut once). */
  cut: boolean;
  /** Set by an `after_answer` cut: runs after the next server chunk is relayed. */
  afterAnswer: (() => void) | undefined;
  /** The trigger of the cut this connection took, if it took one. */
  trigger: Trigger | undefined;
}

/**
 * Starts a forwarder on a free port of 127.0.0.1.
 *
 * A client connection whose target refuses or fails is closed at once, so
 * the client sees a broken connection and reconnects, as it would against a
 * dead server; either side closing closes the other.
 *
 * @param target the first target port on 127.0.0.1.
 * @param options the hook `terminate` cuts use.
 * @returns the forwarder, listening.
 * @throws RangeError when the target port is not 1 to 65535.
 */
export async function startForwarder(
  target: number,
  options: ForwarderOptions = {},
): Promise<Forwarder> {
  assertPort(target);
  let current = target;
  const pairs = new Set<Pair>();
  let armed: Armed[] = [];
  let chunks = 0;

  const drop = (pair: Pair): void => {
    pairs.delete(pair);
    pair.client.destroy();
    pair.upstream.destroy();
  };

  const cutNow = (pair: Pair, way: CutWay): void => {
    switch (way) {
      case 'rst':
        pairs.delete(pair);
        pair.client.resetAndDestroy();
        pair.upstream.resetAndDestroy();
        return;
      case 'fin':
        pair.silent = true;
        pair.client.end();
        pair.upstream.end();
        return;
      case 'half_open':
        // The server sees a reset; the client keeps a socket nobody answers
        // on, until it closes it itself.
        pair.silent = true;
        pair.upstream.resetAndDestroy();
        return;
      case 'black_hole':
        pair.silent = true;
        return;
      case 'terminate': {
        const hook = options.terminate;
        if (hook === undefined) throw new Error('a terminate cut needs the terminate option');
        void hook(pair.upstream.localPort ?? 0).catch(() => undefined);
        return;
      }
    }
  };

  const takeTrigger = (pair: Pair, chunk: Buffer): Armed | undefined => {
    if (pair.cut || armed.length === 0) return undefined;
    const text = chunk.toString('latin1');
    const index = armed.findIndex((a) => a.trigger.match.test(text));
    if (index === -1) return undefined;
    const [taken] = armed.splice(index, 1);
    pair.cut = true;
    pair.trigger = taken?.trigger;
    return taken;
  };

  const server = net.createServer((client) => {
    const upstream = net.connect(current, '127.0.0.1');
    const pair: Pair = {
      client,
      upstream,
      silent: false,
      cut: false,
      afterAnswer: undefined,
      trigger: undefined,
    };
    pairs.add(pair);
    const close = (): void => {
      drop(pair);
    };
    // Behind a half-open or black-holed connection the client hears nothing,
    // the server's close included: only the client's own close ends it.
    const upstreamClosed = (): void => {
      if (pair.silent && !client.destroyed) return;
      drop(pair);
    };
    client.on('error', close);
    upstream.on('error', upstreamClosed);
    client.on('close', close);
    upstream.on('close', upstreamClosed);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on('data', (chunk: Buffer) => {
      chunks += 1;
      options.onClientData?.(chunk);
      if (pair.silent) return;
      const taken = takeTrigger(pair, chunk);
      if (taken === undefined) {
        upstream.write(chunk);
        return;
      }
      const { when, way } = taken.trigger;
      if (when === 'before') {
        cutNow(pair, way);
        if (way === 'terminate') upstream.write(chunk);
      } else if (when === 'after') {
        upstream.write(chunk);
        cutNow(pair, way);
      } else {
        upstream.write(chunk);
        pair.afterAnswer = () => {
          cutNow(pair, way);
        };
      }
      taken.fire();
    });
    upstream.on('data', (chunk: Buffer) => {
      if (pair.silent) return;
      client.write(chunk);
      const after = pair.afterAnswer;
      if (after !== undefined) {
        pair.afterAnswer = undefined;
        after();
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as net.AddressInfo).port;
  const dropAll = (): void => {
    for (const pair of [...pairs]) drop(pair);
    pairs.clear();
  };
  let closing: Promise<void> | undefined;
  return {
    port,
    get target() {
      return current;
    },
    switchTo: (next) => {
      assertPort(next);
      current = next;
      dropAll();
    },
    reset: () => {
      for (const pair of [...pairs]) {
        pair.client.resetAndDestroy();
        pair.upstream.destroy();
      }
      pairs.clear();
    },
    connections: () => pairs.size,
    clientChunks: () => chunks,
    arm: (trigger) => {
      if (trigger.way === 'terminate' && options.terminate === undefined) {
        throw new Error('a terminate cut needs the terminate option of startForwarder');
      }
      let fire!: () => void;
      const fired = new Promise<void>((resolve) => (fire = resolve));
      const entry: Armed = { trigger, fire };
      armed.push(entry);
      return {
        fired,
        disarm: () => {
          const before = armed.length;
          armed = armed.filter((a) => a !== entry);
          return armed.length < before;
        },
      };
    },
    disarmAll: () => {
      const count = armed.length;
      armed = [];
      return count;
    },
    dropSilent: (cutBy) => {
      const silent = [...pairs].filter(
        (pair) =>
          pair.silent &&
          (cutBy === undefined || (pair.trigger !== undefined && cutBy(pair.trigger))),
      );
      for (const pair of silent) drop(pair);
      return silent.length;
    },
    close: () =>
      (closing ??= new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
        dropAll();
      })),
  };
}
