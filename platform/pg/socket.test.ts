/**
 * The pool's sockets: an error told with the close, the host picked from
 * the URL's list, TLS left to the driver.
 */
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { testDatabase } from '../../test/harness/db.js';
import { createSql } from './client.js';
import { erroredWithItsClose, poolSockets } from './socket.js';

/** A server on 127.0.0.1 that counts its connections, closed at teardown. */
async function counting(t: Test): Promise<{ port: number; accepted: () => number }> {
  let accepted = 0;
  const server = net.createServer((c) => {
    accepted += 1;
    c.on('error', () => undefined);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => new Promise((r) => server.close(r)));
  return { port: (server.address() as net.AddressInfo).port, accepted: () => accepted };
}

/** What a socket reset by `destroy` tells, in order, with a tick and an immediate queued after it. */
async function orderOfEvents(socket: net.Socket): Promise<string[]> {
  const seen: string[] = [];
  socket.on('error', (err: NodeJS.ErrnoException) => seen.push(`error ${String(err.code)}`));
  const closed = new Promise((resolve) => socket.once('close', resolve));
  await once(socket, 'connect');
  socket.destroy(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));
  process.nextTick(() => seen.push('tick'));
  setImmediate(() => seen.push('immediate'));
  await closed;
  seen.push('close');
  return seen;
}

void t.test('a reset socket tells its error with its close, after what ran between', async (t) => {
  const { port } = await counting(t);
  t.same(
    await orderOfEvents(net.connect(port, '127.0.0.1')),
    ['error ECONNRESET', 'tick', 'immediate', 'close'],
    "Node.js's own order: the window between the error and the close",
  );
  t.same(
    await orderOfEvents(erroredWithItsClose(net.connect(port, '127.0.0.1'))),
    ['tick', 'immediate', 'error ECONNRESET', 'close'],
    'held: nothing runs between the error and the close',
  );
});

void t.test('an error of a socket still open goes through at once', async (t) => {
  const { port } = await counting(t);
  const socket = erroredWithItsClose(net.connect(port, '127.0.0.1'));
  await once(socket, 'connect');
  const seen: unknown[] = [];
  socket.on('error', (err) => seen.push(err));
  const err = new Error('told while open');
  socket.emit('error', err);
  t.same(seen, [err], 'heard in the same turn');
  socket.destroy();
  await once(socket, 'close');
  t.same(seen, [err], 'and not again at the close');
});

void t.test('a held error nobody listens to any more is dropped at the close', async (t) => {
  const { port } = await counting(t);
  const socket = erroredWithItsClose(net.connect(port, '127.0.0.1'));
  const onError = (): void => undefined;
  socket.on('error', onError);
  await once(socket, 'connect');
  const closed = new Promise<boolean>((resolve) => socket.once('close', resolve));
  socket.destroy(new Error('reset'));
  // The driver removes its listeners when it hears the close; one removed
  // earlier must not turn the held error into an uncaught exception.
  socket.removeListener('error', onError);
  t.equal(await closed, true, 'the close still says it had an error');
});

void t.test(
  'the factory connects to the one host, or a Unix-domain socket by its path',
  async (t) => {
    const { port, accepted } = await counting(t);
    const one = await poolSockets()({ host: ['127.0.0.1'], port: [port], ssl: false });
    await once(one, 'connect');
    t.match(one, { host: '127.0.0.1', port }, "named for the driver's messages");
    one.destroy();
    await new Promise((r) => setTimeout(r, 50));
    t.equal(accepted(), 1, 'one connection made');

    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pool-socket-'));
    t.teardown(() => {
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const file = path.join(dir, '.s.PGSQL.5432');
    const server = net.createServer((c) => c.end()).listen(file);
    await once(server, 'listening');
    t.teardown(() => new Promise((r) => server.close(r)));
    const local = await poolSockets()({ host: ['ignored'], port: [1], path: file, ssl: false });
    await once(local, 'connect');
    t.pass('connected by the path');
    local.destroy();
  },
);

void t.test(
  'over a host list the factory stays on a host that serves and moves on past one whose socket closed',
  async (t) => {
    const a = await counting(t);
    const b = await counting(t);
    const target = { host: ['127.0.0.1', '127.0.0.1'], port: [a.port, b.port], ssl: false };
    const factory = poolSockets();
    const opened = async (): Promise<net.Socket> => {
      const socket = await factory(target);
      socket.on('error', () => undefined);
      await once(socket, 'connect');
      return socket;
    };
    const closed = async (socket: net.Socket): Promise<void> => {
      const done = once(socket, 'close');
      socket.destroy();
      await done;
    };
    const first = await opened();
    const second = await opened();
    t.same([first.remotePort, second.remotePort], [a.port, a.port], 'both on the first host');
    await closed(first);
    const third = await opened();
    t.equal(third.remotePort, b.port, 'a close moves the pool on to the next host');
    await closed(second);
    const fourth = await opened();
    t.equal(fourth.remotePort, b.port, 'a close of a socket to a host left already moves nothing');
    await closed(third);
    await closed(fourth);
    const fifth = await opened();
    t.equal(fifth.remotePort, a.port, 'from the last host back to the first');
    await closed(fifth);
    t.same([a.accepted(), b.accepted()], [3, 2]);
  },
);

void t.test(
  'over a host list the factory moves on past a closed socket even once the driver removed its listeners, as it does to lay TLS over it',
  async (t) => {
    const a = await counting(t);
    const b = await counting(t);
    const target = { host: ['127.0.0.1', '127.0.0.1'], port: [a.port, b.port], ssl: 'require' };
    const factory = poolSockets();
    const first = await factory(target);
    await once(first, 'connect');
    // postgres.js's secure(): every listener of the plain socket goes
    // before tls.connect takes it over.
    first.removeAllListeners();
    const closed = new Promise((resolve) => {
      const emit = first.emit.bind(first);
      first.emit = ((event: string, ...args: unknown[]) => {
        if (event === 'close') setImmediate(resolve);
        return emit(event, ...args);
      }) as typeof first.emit;
    });
    first.destroy();
    await closed;
    const second = await factory(target);
    second.on('error', () => undefined);
    await once(second, 'connect');
    t.equal(second.remotePort, b.port, 'the next socket goes to the next host');
    second.destroy();
  },
);

void t.test(
  'once every host of a list failed since the last socket that settled, the next socket waits, and no close is ever held',
  async (t) => {
    const a = await counting(t);
    const b = await counting(t);
    const target = { host: ['127.0.0.1', '127.0.0.1'], port: [a.port, b.port], ssl: false };
    let ended = false;
    const factory = poolSockets({ backoffMs: () => 400, settleMs: 100, ended: () => ended });
    /**
     * Makes a socket (timing the factory), closes it after `openMs`, and
     * times how long its close took to be told.
     */
    const tried = async (
      openMs: number,
    ): Promise<{ port: number; madeMs: number; closeMs: number }> => {
      const asked = performance.now();
      const socket = await factory(target);
      const madeMs = performance.now() - asked;
      socket.on('error', () => undefined);
      await once(socket, 'connect');
      const port = socket.remotePort!;
      await new Promise((r) => setTimeout(r, openMs));
      const closed = once(socket, 'close');
      const started = performance.now();
      socket.destroy();
      await closed;
      return { port, madeMs, closeMs: performance.now() - started };
    };
    const first = await tried(0);
    t.equal(first.port, a.port);
    t.ok(first.madeMs < 200, `the first try is made at once (${first.madeMs.toFixed(0)} ms)`);
    const second = await tried(0);
    t.equal(second.port, b.port);
    t.ok(second.madeMs < 200, `one host failed: made at once (${second.madeMs.toFixed(0)} ms)`);
    const third = await tried(200);
    t.equal(third.port, a.port, 'back to the first host');
    t.ok(
      third.madeMs >= 350,
      `every host failed: made after the wait (${third.madeMs.toFixed(0)} ms)`,
    );
    const fourth = await tried(0);
    t.equal(fourth.port, b.port);
    t.ok(
      fourth.madeMs < 200,
      `the third settled, which cleared the failures: made at once (${fourth.madeMs.toFixed(0)} ms)`,
    );
    for (const { closeMs } of [first, second, third, fourth]) {
      t.ok(closeMs < 200, `every close is told at once (${closeMs.toFixed(0)} ms)`);
    }
    // Every host failed again; the pool ends while the next socket waits.
    await tried(0);
    const waiting = factory(target);
    ended = true;
    await t.rejects(Promise.resolve(waiting), { message: 'the pool has ended' });
    t.same([a.accepted(), b.accepted()], [3, 2], 'no socket made after the end');
  },
);

void t.test('a socket that will carry TLS is left to the driver', async (t) => {
  const { port } = await counting(t);
  const socket = await poolSockets()({ host: ['127.0.0.1'], port: [port], ssl: 'require' });
  t.same(
    await orderOfEvents(socket),
    ['error ECONNRESET', 'tick', 'immediate', 'close'],
    'its error is not held',
  );
});

void t.test(
  'a pool over a host list connects every connection though the first host refuses',
  async (t) => {
    const tdb = await testDatabase(t);
    // A port nothing listens on: a server closed right after it bound.
    const refused = net.createServer().listen(0, '127.0.0.1');
    await once(refused, 'listening');
    const closedPort = (refused.address() as net.AddressInfo).port;
    await new Promise((r) => refused.close(r));
    const url = new URL(tdb.appUrl);
    const list = `postgres://${url.username}:${url.password}@127.0.0.1:${String(closedPort)},${url.host}${url.pathname}`;
    const sql = createSql(list, { max: 4, applicationName: 'socket-test', connectTimeoutMs: 2000 });
    t.teardown(() => sql.end({ timeout: 1 }));
    // Four at once, each holding its connection, so every connection opens.
    const rows = await Promise.all(
      [1, 2, 3, 4].map((n) => sql<{ n: number }[]>`select ${n}::int as n, pg_sleep(0.2)`),
    );
    t.same(
      rows.map((r) => r[0]?.n),
      [1, 2, 3, 4],
    );
    const [count] = await sql<{ n: string }[]>`
    select count(*) as n from pg_stat_activity where application_name = 'socket-test'`;
    t.equal(Number(count?.n), 4, 'four sessions, all on the host that answers');
  },
);
