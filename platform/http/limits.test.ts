/**
 * The pipelining read guard and the lingering close on a bare Node.js
 * server, where answers can be written synchronously: what Node.js does
 * when it pauses a connection in the middle of a chunk the guard is
 * handing to the parser, and the bounds of a lingering close.
 */
import { EventEmitter } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import t, { type Test } from 'tap';
import {
  guardPipelinedReads,
  lingerOnClose,
  pipeliningGuard,
  LINGER_BYTES,
  LINGER_MS,
  type PipeliningClose,
} from './limits.js';

void t.test('requests in a chunk Node.js pauses in the middle are all answered', async (t) => {
  const big = Buffer.alloc(1 << 20, 97);
  let served = 0;
  // Answered at once and large: the second request of the chunk finds the
  // first answer not drained, and Node.js pauses the connection.
  const server = http.createServer((_req, res) => {
    served++;
    res.end(big);
  });
  const closed: PipeliningClose[] = [];
  guardPipelinedReads(server, 16, (c) => closed.push(c));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const port = (server.address() as net.AddressInfo).port;
  const socket = net.connect(port, '127.0.0.1');
  let received = 0;
  socket.on('data', (d: Buffer) => (received += d.length));
  const one = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n';
  socket.write(one.repeat(5) + one.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n'));
  await new Promise((resolve) => socket.on('close', resolve));
  t.equal(served, 6, 'every request ran');
  t.ok(received > 6 * big.length, `every answer arrived (${String(received)} bytes)`);
  t.same(closed, [], 'no connection closed for pipelining');
});

void t.test('a connection over the limit is closed, the rest of its chunk unparsed', async (t) => {
  let served = 0;
  // Never answered: every request awaits its answer.
  const server = http.createServer(() => {
    served++;
  });
  const closed: PipeliningClose[] = [];
  guardPipelinedReads(server, 3, (c) => closed.push(c));
  // Listed first, before the guard's: sees every head the parser completes.
  let parsedHeads = 0;
  server.prependListener('request', () => parsedHeads++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const port = (server.address() as net.AddressInfo).port;
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  const one = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n';
  socket.write(one.repeat(10));
  await new Promise((resolve) => socket.on('close', resolve));
  t.equal(served, 3, 'the limit ran, nothing past it');
  t.equal(closed.length, 1, 'told once');
  t.equal(closed[0]?.waiting, 3);
  // Node.js's own count: the fourth head was the last one parsed.
  t.equal(parsedHeads, 4, 'the parser stopped at the first request over the limit');
});

/**
 * A bare server that answers every request 413 with Connection: close at
 * once, without reading its body, the way the application answers a body
 * over the limit.
 */
async function refusingServer(t: Test): Promise<number> {
  const server = http.createServer((req, res) => {
    lingerOnClose(req.socket);
    res.writeHead(413, { connection: 'close', 'content-length': '2' });
    res.end('no');
  });
  guardPipelinedReads(server, 16, () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as net.AddressInfo).port;
}

void t.test('a lingering close reads and drops at most LINGER_BYTES', async (t) => {
  const port = await refusingServer(t);
  // Half-open, as a client still writing its body.
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  socket.on('error', () => undefined);
  let answer = '';
  socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
  const size = 4 * LINGER_BYTES;
  socket.write(`POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ${String(size)}\r\n\r\n`);
  const piece = Buffer.alloc(2 ** 16);
  // Written as fast as the server takes it, never more than it took.
  let written = 0;
  const pump = () => {
    while (written < size && !socket.destroyed) {
      written += piece.length;
      if (!socket.write(piece)) {
        socket.once('drain', pump);
        return;
      }
    }
  };
  pump();
  await new Promise((resolve) => socket.on('close', resolve));
  // The system's buffers on both sides take some more than the server read.
  t.ok(written > LINGER_BYTES, `read up to LINGER_BYTES (${String(written)} written)`);
  t.ok(written < 2 * LINGER_BYTES, 'then cut, long before the whole body');
  t.match(answer, /^HTTP\/1\.1 413 /, 'the answer was sent first');
});

void t.test('a lingering close waits at most LINGER_MS for a client that stalls', async (t) => {
  const port = await refusingServer(t);
  // Half-open, as a client still writing its body: the server's FIN does
  // not end this side.
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  socket.on('error', () => undefined);
  socket.resume();
  let ended = 0;
  socket.on('end', () => (ended = performance.now()));
  const started = performance.now();
  socket.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n' + 'x'.repeat(1000));
  // A byte now and then: the write after the server let go is refused.
  const trickle = setInterval(() => socket.write('x'), 100);
  await new Promise((resolve) => socket.on('close', resolve));
  clearInterval(trickle);
  const closed = performance.now() - started;
  t.ok(ended > 0 && ended - started < 1000, 'the server shut its side after the answer at once');
  t.ok(closed >= LINGER_MS - 100, `then read until LINGER_MS (${closed.toFixed(0)} ms)`);
  t.ok(closed < LINGER_MS + 2000, 'and no longer');
});

void t.test('a request whose connection the server already shut is not run, first or not', (t) => {
  // The hook alone, on a connection whose server side is ended (a close
  // answer finished, or the client's FIN answered) and not yet destroyed:
  // nobody can read an answer, so nothing may take effect.
  const hook = pipeliningGuard(4);
  const socket = { destroyed: false, writableEnded: true };
  let hijacked = 0;
  let done = 0;
  const req = { raw: { socket }, log: { info: () => undefined } };
  const reply = {
    raw: new EventEmitter(),
    hijack: () => {
      hijacked++;
    },
  };
  const call = hook as unknown as (r: unknown, p: unknown, d: () => void) => void;
  call(req, reply, () => {
    done++;
  });
  t.equal(done, 1, 'the hook hands on');
  t.equal(hijacked, 1, 'with the reply hijacked: no hook, handler or answer runs');
  t.end();
});
