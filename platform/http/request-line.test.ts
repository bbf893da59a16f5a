/**
 * Whitespace in the request line, over real sockets to the real server:
 * Node.js's parser takes a run of spaces between the method, the target
 * and the version as one (RFC 9112 section 3 lets a recipient split on
 * whitespace), and exposes nothing that tells the two apart, so a request
 * with two spaces routes exactly as the one with one (docs/DECISIONS.md).
 * A tab or a leading or trailing space is a malformed head.
 */
import net, { type AddressInfo } from 'node:net';
import t from 'tap';
import { testServerOptions } from '../../test/harness/http-server.js';
import { createHttpServer } from './server.js';

/** Writes one request head as given and reads the whole answer. */
function exchange(port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => {
      socket.write(head);
    });
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('close', () => {
      resolve(answer);
    });
    socket.on('error', reject);
  });
}

/** The status line and the body of an answer: what routing decided. */
function outcome(answer: string): { status: string; body: string } {
  const [head = '', body = ''] = answer.split('\r\n\r\n');
  return { status: head.split('\r\n')[0] ?? '', body };
}

void t.test('the request line: spaces as Node.js reads them', async (t) => {
  const app = await createHttpServer(testServerOptions());
  const seen: string[] = [];
  app.get('/api/v1/things/:id', { config: { auth: 'none' } }, (req) => {
    seen.push(req.raw.url ?? '');
    return { id: (req.params as { id: string }).id };
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const port = (app.server.address() as AddressInfo).port;
  const head = (line: string) => `${line}\r\nHost: x\r\nConnection: close\r\n\r\n`;

  const single = outcome(await exchange(port, head('GET /api/v1/things/a?b=1 HTTP/1.1')));
  t.equal(single.status, 'HTTP/1.1 200 OK');
  t.same(JSON.parse(single.body), { id: 'a' });
  for (const line of [
    'GET  /api/v1/things/a?b=1 HTTP/1.1',
    'GET   /api/v1/things/a?b=1 HTTP/1.1',
    'GET /api/v1/things/a?b=1  HTTP/1.1',
  ]) {
    const got = outcome(await exchange(port, head(line)));
    t.same(got, single, `${JSON.stringify(line)} routes as the single-space line`);
  }
  t.same(seen, Array<string>(4).fill('/api/v1/things/a?b=1'), 'the handler saw the same target');

  for (const line of [
    'GET\t/api/v1/things/a HTTP/1.1',
    ' GET /api/v1/things/a HTTP/1.1',
    'GET /api/v1/things/a HTTP/1.1 ',
    'GET /api/v1/things/a b HTTP/1.1',
  ]) {
    const got = outcome(await exchange(port, head(line)));
    t.match(got.status, /^HTTP\/1\.1 400 /, JSON.stringify(line));
    t.match(JSON.parse(got.body), { code: 'validation_failed' }, JSON.stringify(line));
  }
  t.equal(seen.length, 4, 'no malformed line reached the handler');
});
