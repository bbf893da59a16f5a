/**
 * A small TCP forwarder on 127.0.0.1: one address that follows the primary,
 * as a virtual IP or a proxy driven by health checks does in a real
 * deployment. Clients connect to the forwarder's port; each connection is
 * relayed byte for byte to the current target port. A switch drops every
 * relayed connection (a client must never keep talking to the old primary
 * through it) and sends new ones to the new target.
 */
import net from 'node:net';

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
  /** How many client connections are relayed right now. */
  connections(): number;
  /** Stops listening and drops every connection. Safe to call twice. */
  close(): Promise<void>;
}

function assertPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RangeError(`forwarder target port must be an integer from 1 to 65535, got ${port}`);
  }
}

/**
 * Starts a forwarder on a free port of 127.0.0.1.
 *
 * A client connection whose target refuses or fails is closed at once, so
 * the client sees a broken connection and reconnects, as it would against a
 * dead server; either side closing closes the other.
 *
 * @param target the first target port on 127.0.0.1.
 * @returns the forwarder, listening.
 * @throws RangeError when the target port is not 1 to 65535.
 */
export async function startForwarder(target: number): Promise<Forwarder> {
  assertPort(target);
  let current = target;
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  const server = net.createServer((client) => {
    const upstream = net.connect(current, '127.0.0.1');
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.pipe(upstream);
    upstream.pipe(client);
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
    for (const { client, upstream } of [...pairs]) {
      client.destroy();
      upstream.destroy();
    }
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
    connections: () => pairs.size,
    close: () =>
      (closing ??= new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
        dropAll();
      })),
  };
}
