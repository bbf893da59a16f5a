/**
 * Requests pipelined on one connection behind an answer that closes it,
 * and requests the server answers without Fastify (an unmet Expect): a
 * real listening application on a real PostgreSQL, written to over a raw
 * socket.
 */
import net from 'node:net';
import t from 'tap';
import { startTestApp, type TestApp } from './harness/app.js';

/** Writes `bytes` in one write and collects what comes back until the close or `ms`. */
async function exchange(k: TestApp, bytes: string, ms: number): Promise<string> {
  const address = k.app.http.server.address() as net.AddressInfo;
  const socket = net.connect(address.port, '127.0.0.1');
  let got = '';
  socket.on('data', (c: Buffer) => (got += c.toString('latin1')));
  socket.on('error', () => undefined);
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  socket.write(bytes);
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
  socket.destroy();
  return got;
}

void t.test(
  'a request pipelined behind an answer that closes the connection is never run',
  async (t) => {
    const k = await startTestApp(t);
    await k.app.http.listen({ port: 0, host: '127.0.0.1' });
    const head = (type: string, length: number): string =>
      `POST /api/v1/plain-effects HTTP/1.1\r\nHost: a\r\nAuthorization: ${k.alice.headers.authorization}\r\nContent-Type: ${type}\r\nContent-Length: ${String(length)}\r\n\r\n`;
    const second = JSON.stringify({ label: 'behind-the-close' });
    // A Host that is no host: refused as framing, and the answer closes.
    const got = await exchange(
      k,
      `GET /readyz HTTP/1.1\r\nHost: a@b\r\n\r\n${head('application/json', second.length)}${second}`,
      1500,
    );
    t.match(got, /^HTTP\/1\.1 400 /, 'the first is refused');
    t.match(got, /\r\nconnection: close\r\n/i, 'and its answer closes');
    t.notMatch(got.slice(12), /HTTP\/1\.1 /, 'no second answer');
    t.same(
      (await k.effects()).filter((e) => e.label === 'behind-the-close'),
      [],
      'and the second never ran: nobody reads its answer',
    );
  },
);

void t.test(
  'requests with an unmet Expect count against the pipelining limit: the connection is closed at it',
  async (t) => {
    const k = await startTestApp(t, { env: { HTTP__MAX_PIPELINED_REQUESTS: '4' } });
    await k.app.http.listen({ port: 0, host: '127.0.0.1' });
    const got = await exchange(
      k,
      'GET /readyz HTTP/1.1\r\nHost: a\r\nExpect: x\r\n\r\n'.repeat(300),
      2000,
    );
    const answers = got.split('HTTP/1.1 417 ').length - 1;
    t.ok(answers >= 1, 'the first is answered 417');
    t.ok(answers <= 5, `at most the limit and one more parsed (${String(answers)} answers)`);
  },
);

void t.test(
  'a request behind a body over the limit never runs, in the same write or while the close lingers',
  async (t) => {
    const k = await startTestApp(t, { env: { HTTP__BODY_LIMIT: '1kb' } });
    await k.app.http.listen({ port: 0, host: '127.0.0.1' });
    const request = (label: string, key?: string): string => {
      const body = JSON.stringify({ label });
      return `POST /api/v1/${key === undefined ? 'plain-effects' : 'effects'} HTTP/1.1\r\nHost: a\r\nAuthorization: ${k.alice.headers.authorization}\r\n${key === undefined ? '' : `Idempotency-Key: ${key}\r\n`}Content-Type: application/json\r\nContent-Length: ${String(body.length)}\r\n\r\n${body}`;
    };
    const oversize = `POST /api/v1/plain-effects HTTP/1.1\r\nHost: a\r\nAuthorization: ${k.alice.headers.authorization}\r\nContent-Type: application/json\r\nContent-Length: 2048\r\n\r\n${' '.repeat(2048)}`;
    const behind = `${request('behind-413-plain')}${request('behind-413-keyed', '0193e4b2-0000-7000-8000-000000000001')}`;
    const same = await exchange(k, `${oversize}${behind}`, 1500);
    t.match(same, /^HTTP\/1\.1 413 /, 'the first is refused');
    t.match(same, /\r\nconnection: close\r\n/i, 'and its answer closes');
    t.notMatch(same.slice(12), /HTTP\/1\.1 /, 'no second answer');

    // The rest written after the answer arrived, while the server still reads.
    const address = k.app.http.server.address() as net.AddressInfo;
    const socket = net.connect(address.port, '127.0.0.1');
    socket.on('error', () => undefined);
    let got = '';
    const answered = new Promise<void>((resolve) =>
      socket.on('data', (c: Buffer) => {
        got += c.toString('latin1');
        if (got.includes('\r\n\r\n')) resolve();
      }),
    );
    await new Promise<void>((resolve) => socket.once('connect', resolve));
    socket.write(oversize.slice(0, oversize.indexOf('\r\n\r\n') + 4));
    await answered;
    socket.write(`${' '.repeat(2048)}${request('lingering-413-plain')}`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    socket.destroy();
    t.match(got, /^HTTP\/1\.1 413 /, 'the later one: refused');
    t.notMatch(got.slice(12), /HTTP\/1\.1 /, 'and no second answer');

    t.same(
      (await k.effects()).map((e) => e.label),
      [],
      'and none of the requests behind it ran',
    );
  },
);
