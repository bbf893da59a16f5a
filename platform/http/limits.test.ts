/**
 * The pipelining read guard on a bare Node.js server, where answers can be
 * written synchronously: what Node.js does when it pauses a connection in
 * the middle of a chunk the guard is handing to the parser.
 */
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { guardPipelinedReads, type PipeliningClose } from './limits.js';

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

void t.test('a connection over the limit is closed with what it left unparsed', async (t) => {
  let served = 0;
  // Never answered: every request awaits its answer.
  const server = http.createServer(() => {
    served++;
  });
  const closed: PipeliningClose[] = [];
  guardPipelinedReads(server, 3, (c) => closed.push(c));
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
  t.equal(closed[0]?.unparsedBytes, 7 * one.length, 'the seven heads over the limit unparsed');
});
