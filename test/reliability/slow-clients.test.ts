/**
 * Hostile clients at the HTTP edge, against the real server process: a
 * stalled body and a trickled one get 408 problems and lose their sockets
 * within http.request_timeout; a slow head within http.headers_timeout; a
 * flood of parked connections is cut at http.max_connections; and a
 * well-behaved client is served meanwhile. Short limits are configured, so
 * the cases run in seconds.
 */
import net from 'node:net';
import t from 'tap';
import { testDatabase } from '../harness/db.js';
import { startServerProcess } from '../harness/process.js';
import { captureStdout } from '../e2e/processes.js';

/** Sends raw bytes and collects what comes back until the server closes. */
function rawClient(port: number): {
  socket: net.Socket;
  closed: Promise<{ answer: string; ms: number }>;
} {
  const started = performance.now();
  const socket = net.connect(port, '127.0.0.1');
  let answer = '';
  socket.on('data', (d: Buffer) => (answer += d.toString()));
  socket.on('error', () => undefined);
  const closed = new Promise<{ answer: string; ms: number }>((resolve) => {
    socket.on('close', () => {
      resolve({ answer, ms: performance.now() - started });
    });
  });
  return { socket, closed };
}

void t.test('slow and parked clients cost a bounded time and no 5xx', async (t) => {
  const db = await testDatabase(t);
  // A real principal: the body is read only after authentication.
  const cli = startServerProcess(['principal', 'create', '--name', 'Slow'], {
    DATABASE__URL: db.appUrl,
  });
  const cliOut = captureStdout(cli);
  t.equal(await cli.exited, 0, cli.stderr());
  const token = /token \(shown once, keep it secret\): (\S+)/.exec(cliOut())?.[1] ?? '';
  const server = startServerProcess(['--role', 'api'], {
    DATABASE__URL: db.appUrl,
    HTTP__PORT: '0',
    HTTP__REQUEST_TIMEOUT: '2s',
    HTTP__HEADERS_TIMEOUT: '1s',
    HTTP__MAX_CONNECTIONS: '20',
    LOG__LEVEL: 'info',
  });
  t.teardown(() => {
    server.child.kill('SIGKILL');
  });
  const listening = await server.waitForLine((l) => l['msg'] === 'listening');
  const base = listening['address'] as string;
  const port = Number(new URL(base).port);

  // A body that stops after a few bytes, and one trickled a byte at a time.
  const stalled = rawClient(port);
  stalled.socket.write(
    'POST /api/v1/accounts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      `Authorization: Bearer ${token}\r\nContent-Length: 100\r\n\r\n{"name":`,
  );
  const trickled = rawClient(port);
  trickled.socket.write(
    'POST /api/v1/accounts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      `Authorization: Bearer ${token}\r\nContent-Length: 100\r\n\r\n`,
  );
  const drip = setInterval(() => trickled.socket.write(' '), 300);
  t.teardown(() => {
    clearInterval(drip);
  });
  // A head that never ends.
  const slowHead = rawClient(port);
  slowHead.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');

  const [s, tr, h] = await Promise.all([stalled.closed, trickled.closed, slowHead.closed]);
  clearInterval(drip);
  for (const [name, r, limitMs] of [
    ['a stalled body', s, 2000],
    ['a trickled body', tr, 2000],
    ['a slow head', h, 1000],
  ] as const) {
    t.match(r.answer, /^HTTP\/1\.1 408 /, `${name}: 408`);
    t.match(r.answer, /"code":"request_timeout"/, `${name}: a problem`);
    t.ok(
      r.ms >= limitMs * 0.9 && r.ms < limitMs + 3000,
      `${name}: closed after ${String(Math.round(r.ms))} ms`,
    );
  }

  // Parked connections: more than the cap are closed as they come.
  const parked = Array.from({ length: 30 }, () => rawClient(port));
  await new Promise((resolve) => setTimeout(resolve, 300));
  const open = parked.filter((c) => !c.socket.destroyed && c.socket.readyState === 'open');
  t.ok(open.length <= 20, `at most the cap stay open (${String(open.length)})`);
  for (const c of parked) c.socket.destroy();
  await Promise.all(parked.map((c) => c.closed));

  // A well-behaved client is served.
  const res = await fetch(`${base}/healthz`);
  t.equal(res.status, 200);
  t.notOk(
    server.lines.some((l) => typeof l['level'] === 'number' && l['level'] >= 50),
    'nothing logged as an error',
  );

  // SIGTERM while a body stalls: the drain ends within one request timeout
  // (close() alone stops the timeouts and would wait forever).
  const holding = rawClient(port);
  holding.socket.write(
    'POST /api/v1/accounts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      `Authorization: Bearer ${token}\r\nContent-Length: 100\r\n\r\n{`,
  );
  await new Promise((resolve) => setTimeout(resolve, 200));
  const stopAsked = performance.now();
  server.child.kill('SIGTERM');
  t.equal(await server.exited, 0, 'stopped cleanly');
  const took = performance.now() - stopAsked;
  t.ok(took < 2000 + 3000, `and within the request timeout (${String(Math.round(took))} ms)`);
  await holding.closed;
});
