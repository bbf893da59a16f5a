/**
 * The hostile-client suite: what an attacker with nothing but TCP can do
 * to the real server process, and what it costs. Each case asserts the
 * answer (a problem with a code, or a closed socket where HTTP allows
 * nothing else), that the process's file descriptors come back to their
 * baseline and its heap stays bounded, that nothing is logged as an error,
 * and that a well-behaved client is served meanwhile.
 *
 * Counts and times are bounded for `make check`; `make soak` (SOAK=1) runs
 * the same cases ten times larger. Every case talks from a loopback address
 * of its own (127.0.0.x), so the per-address rate limit of one case never
 * decides another's.
 */
import { readdirSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { testDatabase } from '../harness/db.js';
import { startServerProcess } from '../harness/process.js';
import { captureStdout } from '../e2e/processes.js';

const SOAK = process.env['SOAK'] === '1';
/** How much larger the soak variant is. */
const SCALE = SOAK ? 10 : 1;
const MAX_CONNECTIONS = 100;
const MAX_PIPELINED = 4;
// High enough that the pipelining case is not stopped by the rate limit first.
const RATE_LIMIT = 2000;
/** `http.socket_timeout` of the process under attack. */
const SOCKET_TIMEOUT_MS = 3000;

/** An answer read from a raw exchange. */
interface RawExchange {
  readonly bytes: string;
  readonly status: number | undefined;
  readonly closedByServer: boolean;
}

/**
 * Opens a connection from a given local address, writes the bytes, and
 * collects what comes back until the server closes or the deadline passes.
 */
function exchange(
  port: number,
  from: string,
  bytes: string,
  deadlineMs = 5000,
): Promise<RawExchange> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
    let answer = '';
    let closedByServer = false;
    socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    socket.on('error', () => undefined);
    // Only the server ending its side before the deadline counts as its close.
    socket.on('end', () => (closedByServer = true));
    const timer = setTimeout(() => socket.destroy(), deadlineMs);
    socket.on('close', () => {
      clearTimeout(timer);
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(answer)?.[1];
      resolve({
        bytes: answer,
        status: status === undefined ? undefined : Number(status),
        closedByServer,
      });
    });
    socket.write(bytes);
  });
}

/** The JSON body of the first answer in a raw exchange. */
function problemOf(x: RawExchange): { code?: string; errors?: { pointer: string }[] } {
  const head = x.bytes.indexOf('\r\n\r\n');
  const length = /\r\ncontent-length: (\d+)\r\n/i.exec(x.bytes.slice(0, head))?.[1];
  const body = x.bytes.slice(head + 4, head + 4 + Number(length ?? 0));
  try {
    return JSON.parse(body) as { code?: string };
  } catch {
    return {};
  }
}

/** A GET through an agent of one kept-alive connection from 127.0.0.1. */
function wellBehaved(
  agent: http.Agent,
  port: number,
  path: string,
  token: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: '127.0.0.1', port, path, agent, headers: { authorization: `Bearer ${token}` } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, body });
        });
      },
    );
    req.on('error', reject);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

void t.test('hostile clients cost bounded memory and sockets, and no 5xx', async (t) => {
  const db = await testDatabase(t);
  const cli = startServerProcess(['principal', 'create', '--name', 'Polite'], {
    DATABASE__URL: db.appUrl,
  });
  const cliOut = captureStdout(cli);
  t.equal(await cli.exited, 0, cli.stderr());
  const token = /token \(shown once, keep it secret\): (\S+)/.exec(cliOut())?.[1] ?? '';
  const server = startServerProcess(['--role', 'api'], {
    DATABASE__URL: db.appUrl,
    HTTP__PORT: '0',
    HTTP__MAX_CONNECTIONS: String(MAX_CONNECTIONS),
    HTTP__MAX_PIPELINED_REQUESTS: String(MAX_PIPELINED),
    HTTP__RATE_LIMIT_MAX: String(RATE_LIMIT * SCALE),
    // One window for the whole run: the anonymous flood counts on it,
    // so a window ending mid-run would let it through again.
    HTTP__RATE_LIMIT_WINDOW: '1h',
    HTTP__REQUEST_TIMEOUT: '3s',
    HTTP__SOCKET_TIMEOUT: `${String(SOCKET_TIMEOUT_MS)}ms`,
    HTTP__HEADERS_TIMEOUT: '2s',
    LOG__LEVEL: 'info',
  });
  t.teardown(() => {
    server.child.kill('SIGKILL');
  });
  const listening = await server.waitForLine((l) => l['msg'] === 'listening');
  const port = Number(new URL(listening['address'] as string).port);
  const pid = server.child.pid ?? 0;
  const fds = () => readdirSync(`/proc/${String(pid)}/fd`).length;
  /** The process's heap in use, from its own metrics, read from 127.0.0.2. */
  const heapUsed = async (): Promise<number> => {
    const x = await exchange(
      port,
      '127.0.0.2',
      'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      // Generous: on a loaded 2-core machine a scrape beside a flood is
      // slow; unanswered this long (NaN), the flood has won.
      15_000,
    );
    const line = /\nnodejs_heap_size_used_bytes (\d+(?:\.\d+)?(?:e\+\d+)?)/.exec(x.bytes)?.[1];
    return Number(line);
  };
  /** Polls until the descriptors are back within a few of the baseline. */
  const fdsSettle = async (baseline: number): Promise<number> => {
    const deadline = performance.now() + 10_000;
    let now = fds();
    while (now > baseline + 2 && performance.now() < deadline) {
      await sleep(100);
      now = fds();
    }
    return now;
  };
  // One kept-alive connection, opened before any attack: the connection cap
  // refuses new connections while a flood holds them, not this one.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => {
    agent.destroy();
  });
  const served = async (what: string) => {
    const res = await wellBehaved(agent, port, '/api/v1/me', token);
    t.equal(res.status, 200, `${what}: a well-behaved client is served meanwhile`);
  };
  await served('before');
  const baselineFds = fds();
  const baselineHeap = await heapUsed();
  t.ok(baselineHeap > 0, `the heap is read from the metrics (${String(baselineHeap)} bytes)`);

  await t.test('a connection flood is cut at http.max_connections', async (t) => {
    const flood = Array.from({ length: 3 * MAX_CONNECTIONS * SCALE }, (_, i) =>
      net.connect({ host: '127.0.0.1', port, localAddress: `127.0.1.${String(1 + (i % 200))}` }),
    );
    for (const s of flood) s.on('error', () => undefined);
    await sleep(500);
    const held = fds() - baselineFds;
    t.ok(held <= MAX_CONNECTIONS + 2, `the process holds at most the cap (${String(held)} more)`);
    await served('during a connection flood');
    for (const s of flood) s.destroy();
    const after = await fdsSettle(baselineFds);
    t.ok(after <= baselineFds + 2, `descriptors back to baseline (${String(after)})`);
  });

  await t.test('pipelining without reading costs bounded memory', async (t) => {
    const connections = 40;
    const perConnection = 400 * SCALE;
    const request = 'GET /docs/json HTTP/1.1\r\nHost: x\r\n\r\n';
    const sockets = Array.from({ length: connections }, (_, i) => {
      const socket = net.connect({
        host: '127.0.0.1',
        port,
        localAddress: `127.0.2.${String(1 + i)}`,
      });
      socket.on('error', () => undefined);
      // Never read: every answer stays with the server, or is dropped.
      socket.pause();
      socket.write(request.repeat(perConnection));
      return socket;
    });
    let peak = 0;
    let held = 0;
    for (let i = 0; i < 25; i++) {
      await sleep(200);
      peak = Math.max(peak, await heapUsed());
      held = fds() - baselineFds;
    }
    const grown = (peak - baselineHeap) / 2 ** 20;
    // 40 connections each allowed 4 answers of the API document (about
    // 130 KB) hold 20 MB, plus what the collector has not reclaimed yet
    // (about 70 MiB measured); 400 answers each would be 2 GB, and without
    // the limit the metrics scrape itself went unanswered (NaN).
    t.ok(grown < 160, `the heap grew by ${grown.toFixed(1)} MiB at most`);
    // The clients keep their sockets (paused, they do not see the close).
    t.ok(held <= 2, `the server closed the connections past the limit (${String(held)} held)`);
    for (const s of sockets) s.destroy();
    await served('after a pipelining flood');
    const after = await fdsSettle(baselineFds);
    t.ok(after <= baselineFds + 2, `descriptors back to baseline (${String(after)})`);
  });

  await t.test('static files pipelined and never read hold a file each, for a while', async (t) => {
    // Review: 16 pipelined static files per connection, never read, held a
    // descriptor each without a time limit (300 connections: 4,605 fds,
    // 948 MB). Requests on one connection now run one at a time, and a
    // connection that neither reads nor sends is closed after
    // http.socket_timeout.
    const connections = 30;
    const request = 'GET /docs/static/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n';
    const sockets = Array.from({ length: connections }, (_, i) => {
      const socket = net.connect({
        host: '127.0.0.1',
        port,
        localAddress: `127.0.6.${String(1 + i)}`,
      });
      socket.on('error', () => undefined);
      socket.pause();
      socket.write(request.repeat(MAX_PIPELINED));
      return socket;
    });
    const started = performance.now();
    await sleep(1000);
    const during = fds() - baselineFds;
    t.ok(
      during <= 2 * connections + 4,
      `one socket and at most one file per connection (${String(during)} more descriptors)`,
    );
    await served('while static files are held');
    // The clients keep their sockets open and paused: the server lets go.
    const deadline = performance.now() + 10_000;
    let held = fds() - baselineFds;
    while (held > 2 && performance.now() < deadline) {
      await sleep(200);
      held = fds() - baselineFds;
    }
    t.ok(held <= 2, `closed after http.socket_timeout (${String(held)} held)`);
    // From the last byte the server could write, not twice that: Node.js
    // skipped a connection's first timeout while a write of its was queued
    // (180 s held against 90 s): that is at least two timeouts after
    // the requests were written.
    const closedAfter = performance.now() - started;
    t.ok(
      closedAfter < 2 * SOCKET_TIMEOUT_MS,
      `closed ${closedAfter.toFixed(0)} ms after the requests, less than twice the timeout`,
    );
    for (const s of sockets) s.destroy();
  });

  await t.test('an anonymous flood is rate limited by address', async (t) => {
    const from = '127.0.3.1';
    const limit = RATE_LIMIT * SCALE;
    const statuses = new Map<number, number>();
    const requests = [
      'POST /api/v1/accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok_guess.guess\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
      'GET /api/v1/me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      'GET /nothing/here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      'GET /docs/json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    ];
    let last: RawExchange | undefined;
    for (let i = 0; i < limit + 20; i++) {
      last = await exchange(port, from, requests[i % requests.length] ?? '');
      statuses.set(last.status ?? 0, (statuses.get(last.status ?? 0) ?? 0) + 1);
    }
    t.equal(
      statuses.get(429),
      20,
      `the 20 over the limit are 429 (${JSON.stringify([...statuses])})`,
    );
    t.ok(last !== undefined && /\r\nretry-after: \d+\r\n/i.test(last.bytes), 'with Retry-After');
    t.equal(last === undefined ? undefined : problemOf(last).code, 'rate_limited');
    for (const status of statuses.keys()) t.ok(status < 500, `no 5xx (${String(status)})`);
    await served('after an anonymous flood');
  });

  await t.test('malformed framing is refused with a problem and a closed socket', async (t) => {
    const from = '127.0.4.1';
    const cases: [string, string, string][] = [
      ['no Host', 'GET /healthz HTTP/1.1\r\n\r\n', '#header/Host'],
      ['two Host headers', 'GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n', '#header/Host'],
      [
        'a transfer coding besides chunked',
        'POST /api/v1/accounts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n',
        '#header/Transfer-Encoding',
      ],
      ['HTTP/2.0', 'GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n', '#'],
      ['CONNECT', 'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n', '#method'],
      ['a control character', 'GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\u0001b\r\n\r\n', '#'],
      [
        'Content-Length and chunked',
        'POST /api/v1/accounts HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
        '#',
      ],
      [
        'a bad chunk',
        'POST /api/v1/accounts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
        '#',
      ],
    ];
    for (let round = 0; round < SCALE; round++) {
      for (const [name, bytes, pointer] of cases) {
        const x = await exchange(port, from, bytes);
        t.equal(x.status, 400, `${name}: 400`);
        const p = problemOf(x);
        t.equal(p.code, 'validation_failed', `${name}: a problem`);
        t.equal(p.errors?.[0]?.pointer, pointer, `${name}: pointing at ${pointer}`);
        t.ok(x.closedByServer, `${name}: the server closed the connection`);
      }
    }
    // A CONNECT whose client resets at once (it crashed the process).
    for (let i = 0; i < 20 * SCALE; i++) {
      const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
      socket.on('error', () => undefined);
      socket.write('CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n');
      socket.resetAndDestroy();
    }
    await sleep(300);
    t.equal(server.child.exitCode, null, 'the process is still up after CONNECT and a reset');
    await served('after malformed framing');
    const after = await fdsSettle(baselineFds);
    t.ok(after <= baselineFds + 2, `descriptors back to baseline (${String(after)})`);
  });

  await t.test(
    'static-file path tricks are 403 forbidden_path, an unsatisfiable range 416, never 5xx',
    async (t) => {
      const from = '127.0.5.1';
      const get = (path: string, extra = '') =>
        exchange(
          port,
          from,
          `GET ${path} HTTP/1.1\r\nHost: x\r\n${extra}Connection: close\r\n\r\n`,
        );
      for (const path of [
        '/docs/static/../package.json',
        '/docs/static/%00',
        '/docs/static/.',
        '/docs/static//etc/passwd',
        `/docs/static/${'a'.repeat(300)}`,
      ]) {
        const x = await get(path);
        t.equal(x.status, 403, `${path.slice(0, 40)}: refused as forbidden`);
        t.equal(problemOf(x).code, 'forbidden_path', path.slice(0, 40));
      }
      for (const range of ['bytes=999999999-', 'bytes=-0']) {
        const x = await get('/docs/static/swagger-ui.css', `Range: ${range}\r\n`);
        t.equal(x.status, 416, `Range: ${range}`);
        t.equal(problemOf(x).code, 'range_not_satisfiable');
      }
      await served('after path tricks');
    },
  );

  await t.test('a client still writing a body over the limit reads the 413', async (t) => {
    // Review: a body over http.body_limit was answered and the connection
    // closed at once, so a client still writing got EPIPE ("fetch failed")
    // from 4 MiB on, and retried blindly. Up to the amount the server
    // drains (http-limits.md), the answer is read.
    for (const size of [2, 4, 8, 12]) {
      for (const keyed of [false, true]) {
        const res = await fetch(`http://127.0.0.1:${String(port)}/api/v1/accounts`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${token}`,
            'content-type': 'application/json',
            ...(keyed ? { 'idempotency-key': newId() } : {}),
          },
          body: Buffer.alloc(size * 2 ** 20, 32),
        }).catch((err: unknown) => err as Error);
        const what = `${String(size)} MiB${keyed ? ', keyed' : ''}`;
        t.equal(res instanceof Response ? res.status : res.message, 413, `${what}: 413`);
        if (res instanceof Response) await res.body?.cancel();
      }
    }
    await served('after bodies over the limit');
  });

  t.notOk(
    server.lines.some((l) => typeof l['level'] === 'number' && l['level'] >= 50),
    'nothing logged as an error',
  );
  const after = await fdsSettle(baselineFds);
  t.ok(after <= baselineFds + 2, `descriptors at the end back to baseline (${String(after)})`);
});
