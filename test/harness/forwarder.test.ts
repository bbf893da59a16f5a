/**
 * The TCP forwarder the failover test puts in front of PostgreSQL: real
 * sockets on 127.0.0.1, two real TCP servers as targets.
 */
import net from 'node:net';
import t from 'tap';
import { startForwarder } from './forwarder.js';

/** A TCP server that answers every chunk with its name and the chunk. */
async function namedServer(name: string): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      socket.write(`${name}:${chunk.toString()}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as net.AddressInfo;
  return {
    port: address.port,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => {
          resolve();
        });
      }),
  };
}

/** A client connection that records what it receives and when it closes. */
interface Probe {
  readonly socket: net.Socket;
  /** Sends text and resolves with the next chunk received. */
  ask(text: string): Promise<string>;
  /** Resolves once the connection is closed. */
  readonly closed: Promise<void>;
}

async function connect(port: number): Promise<Probe> {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) =>
    socket.once('close', () => {
      resolve();
    }),
  );
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('close', () => {
      reject(new Error('closed before connecting'));
    });
  });
  return {
    socket,
    closed,
    ask: (text) =>
      new Promise((resolve, reject) => {
        socket.once('data', (chunk: Buffer) => {
          resolve(chunk.toString());
        });
        socket.once('close', () => {
          reject(new Error('closed'));
        });
        socket.write(text);
      }),
  };
}

void t.test('the forwarder relays to its target and follows a switch', async (t) => {
  const a = await namedServer('A');
  const b = await namedServer('B');
  const forwarder = await startForwarder(a.port);
  t.teardown(async () => {
    await forwarder.close();
    await a.close();
    await b.close();
  });
  t.not(forwarder.port, a.port, 'the forwarder listens on a port of its own');
  t.equal(forwarder.target, a.port);

  const first = await connect(forwarder.port);
  t.equal(await first.ask('one'), 'A:one', 'bytes reach the target and its answer comes back');
  t.equal(await first.ask('two'), 'A:two', 'the connection stays open between exchanges');

  forwarder.switchTo(b.port);
  t.equal(forwarder.target, b.port);
  await first.closed;
  t.pass('a connection open to the old target is dropped by the switch');
  t.equal(forwarder.connections(), 0, 'no relayed connection is left');

  const second = await connect(forwarder.port);
  t.equal(await second.ask('three'), 'B:three', 'a new connection reaches the new target');
  second.socket.destroy();
  await second.closed;
});

void t.test('a target that is down closes the client connection', async (t) => {
  const down = await namedServer('D');
  const port = down.port;
  await down.close();
  const forwarder = await startForwarder(port);
  t.teardown(() => forwarder.close());
  const probe = await connect(forwarder.port);
  await probe.closed;
  t.pass('the client sees the connection close, it is not left hanging');
  t.equal(forwarder.connections(), 0);
});

void t.test('the target closing a connection closes the client side', async (t) => {
  const a = await namedServer('A');
  const forwarder = await startForwarder(a.port);
  t.teardown(() => forwarder.close());
  const probe = await connect(forwarder.port);
  t.equal(await probe.ask('x'), 'A:x');
  await a.close();
  await probe.closed;
  t.pass('the close of the target side reaches the client');
});

void t.test('close drops every connection and stops listening', async (t) => {
  const a = await namedServer('A');
  t.teardown(() => a.close());
  const forwarder = await startForwarder(a.port);
  const probe = await connect(forwarder.port);
  t.equal(await probe.ask('x'), 'A:x');
  await forwarder.close();
  await probe.closed;
  const refused = await new Promise<string>((resolve) => {
    const s = net.connect(forwarder.port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (err: NodeJS.ErrnoException) => {
      resolve(err.code ?? 'error');
    });
  });
  t.equal(refused, 'ECONNREFUSED', 'nothing listens on the port after close');
  await forwarder.close();
  t.pass('a second close is harmless');
});

void t.test('an invalid target port is refused', async (t) => {
  await t.rejects(startForwarder(0), /target port/);
  const a = await namedServer('A');
  const forwarder = await startForwarder(a.port);
  t.teardown(async () => {
    await forwarder.close();
    await a.close();
  });
  t.throws(() => {
    forwarder.switchTo(70000);
  }, /target port/);
  t.equal(forwarder.target, a.port, 'a refused switch keeps the target');
});

void t.test(
  'dropSilent closes the connections a silent cut left open, and only those',
  async (t) => {
    const a = await namedServer('A');
    t.teardown(() => a.close());
    const forwarder = await startForwarder(a.port);
    t.teardown(() => forwarder.close());
    const cut = await connect(forwarder.port);
    const alive = await connect(forwarder.port);
    let cutClosed = false;
    void cut.closed.then(() => {
      cutClosed = true;
    });
    forwarder.arm({ match: /^hole$/, when: 'after', way: 'black_hole' });
    cut.socket.write('hole');
    // Nothing comes back through a black hole, and the connection stays open.
    await new Promise((r) => setTimeout(r, 100));
    t.equal(cutClosed, false, 'a black-holed connection stays open');
    t.equal(
      forwarder.dropSilent((cut) => cut.way === 'half_open'),
      0,
      'a filter that accepts no cut drops nothing',
    );
    t.equal(
      forwarder.dropSilent((cut) => cut.way === 'black_hole'),
      1,
      'one silent connection dropped',
    );
    await cut.closed;
    t.pass('its client hears the close');
    t.equal(await alive.ask('y'), 'A:y', 'a connection that was not cut still relays');
    t.equal(forwarder.dropSilent(), 0, 'nothing left to drop');
  },
);
