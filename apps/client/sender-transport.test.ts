/**
 * The transport against a real HTTP server: what it does when an answer is
 * cut off or stalls after its headers, when the caller stops it mid-body,
 * how repeated headers read, and that the requests of one transport share a
 * keep-alive connection that `close` ends. The answers' classification is
 * sender-answers.test.ts.
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { describeError } from './sender-lines.js';
import { MAX_BODY_BYTES, traceparentOf, Transport } from './sender-transport.js';

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

async function serve(
  t: Test,
  handler: Handler,
): Promise<{ base: string; ports: number[]; closed: number[] }> {
  const ports: number[] = [];
  const closed: number[] = [];
  const server = http.createServer((req, res) => {
    ports.push(req.socket.remotePort ?? 0);
    handler(req, res);
  });
  server.on('connection', (socket) => {
    const port = socket.remotePort ?? 0;
    socket.once('close', () => closed.push(port));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  );
  return {
    base: `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`,
    ports,
    closed,
  };
}

const never = new AbortController().signal;

void t.test('an answer cut off after its headers is a lost connection', async (t) => {
  const s = await serve(t, (_req, res) => {
    res.writeHead(201, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"id":');
    setTimeout(() => res.socket?.destroy(), 20);
  });
  const transport = new Transport(s.base, 'tok', 2_000);
  const err = await transport.request('GET', '/x', null, undefined, never).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof Error, 'rejected');
  t.match(describeError(err, 2_000), /^connection lost: /);
  transport.close();
});

void t.test('an answer that stalls after its headers ends at the time limit', async (t) => {
  const s = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"id":');
  });
  const transport = new Transport(s.base, 'tok', 300);
  const started = performance.now();
  const err = await transport.request('GET', '/x', null, undefined, never).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.equal((err as Error).name, 'TimeoutError');
  t.equal(describeError(err, 300), 'timeout after 300ms');
  t.ok(performance.now() - started < 10_000, 'it ended');
  transport.close();
});

void t.test("the caller's signal stops a request mid-body with its reason", async (t) => {
  const stop = new AbortController();
  const s = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"id":');
    setTimeout(() => {
      stop.abort();
    }, 20);
  });
  const transport = new Transport(s.base, 'tok', 5_000);
  const err = await transport.request('GET', '/x', null, undefined, stop.signal).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.equal(err, stop.signal.reason, 'rejected with the reason');
  // Already stopped: nothing is sent.
  const before = s.ports.length;
  const again = await transport.request('GET', '/x', null, undefined, stop.signal).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.equal(again, stop.signal.reason);
  t.equal(s.ports.length, before, 'a stopped signal sends nothing');
  transport.close();
});

void t.test(
  'a body is sent with its length, one connection serves a drain, close ends it',
  async (t) => {
    const seen: { length?: string; encoding?: string; body: string }[] = [];
    const s = await serve(t, (req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        seen.push({
          body,
          ...(req.headers['content-length'] === undefined
            ? {}
            : { length: req.headers['content-length'] }),
          ...(req.headers['transfer-encoding'] === undefined
            ? {}
            : { encoding: req.headers['transfer-encoding'] }),
        });
        res.setHeader('idempotent-replay', ['true', 'true']);
        res.setHeader('content-type', 'application/json');
        res.end('{"ok":"\u00e9"}');
      });
    });
    const transport = new Transport(s.base, 'tok', 2_000);
    const body = '{"amount":1,"note":"\u00e9"}';
    const first = await transport.request('POST', '/x', body, 'k1', never);
    const second = await transport.request('GET', '/y', null, undefined, never);
    t.same(
      seen[0],
      { body, length: String(Buffer.byteLength(body)) },
      'content-length in bytes, not chunked',
    );
    t.equal(first.body, '{"ok":"\u00e9"}', 'the body decoded as UTF-8');
    t.equal(first.replayed, false, 'a repeated marker is not a marker');
    t.equal(first.marked, false);
    t.equal(second.status, 200);
    t.equal(s.ports.length, 2);
    t.equal(s.ports[0], s.ports[1], 'both requests on one keep-alive connection');
    t.same(s.closed, [], 'the idle connection is kept');
    transport.close();
    const deadline = performance.now() + 5_000;
    while (s.closed.length === 0 && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    t.same(s.closed, [s.ports[0]], 'close ends the idle connection');
    const third = await transport.request('GET', '/z', null, undefined, never);
    t.equal(third.status, 200, 'a request after close opens a new connection');
    t.not(s.ports[2], s.ports[0]);
    transport.close();
  },
);

void t.test(
  'an oversize answer drops its connection, and the next request opens another',
  async (t) => {
    const s = await serve(t, (req, res) => {
      if (req.url === '/big') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.end(Buffer.alloc(MAX_BODY_BYTES + 1, 0x61));
        return;
      }
      res.end('small');
    });
    const transport = new Transport(s.base, 'tok', 5_000);
    const big = await transport.request('GET', '/big', null, undefined, never);
    t.equal(big.oversize, true);
    t.equal(big.body, '');
    const small = await transport.request('GET', '/small', null, undefined, never);
    t.equal(small.body, 'small');
    t.not(s.ports[1], s.ports[0], 'the oversize answer was not left on a connection for reuse');
    transport.close();
  },
);

void t.test('a refused connection names its code', async (t) => {
  // A port just given back by a closed server: nothing listens on it.
  const closedServer = http.createServer();
  await new Promise<void>((resolve) => closedServer.listen(0, '127.0.0.1', resolve));
  const free = (closedServer.address() as AddressInfo).port;
  await new Promise<void>((resolve) =>
    closedServer.close(() => {
      resolve();
    }),
  );
  const transport = new Transport(`http://127.0.0.1:${String(free)}`, 'tok', 2_000);
  const err = await transport.request('GET', '/x', null, undefined, never).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.match(describeError(err, 2_000), /^ECONNREFUSED: connect ECONNREFUSED 127\.0\.0\.1:/);
  transport.close();
});

/** A raw TCP server that answers every request with the bytes given. */
async function rawServer(t: Test, answer: string): Promise<string> {
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined);
    socket.once('data', () => {
      socket.write(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      }),
  );
  return `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`;
}

void t.test(
  'a 101 to a request that asked for no upgrade is a lost connection, at once',
  async (t) => {
    // node:http calls no answer callback for a 101 and emits no error: the
    // request only closes, and without a listener for that it would wait for
    // its time limit (a short program's event loop would empty first).
    const base = await rawServer(
      t,
      'HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n',
    );
    const transport = new Transport(base, 'tok', 30_000);
    const started = performance.now();
    const err = await transport.request('POST', '/x', '{}', 'k', never).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.match(describeError(err, 30_000), /^connection lost: /);
    t.ok(performance.now() - started < 10_000, 'before the time limit');
    transport.close();
  },
);

void t.test('a complete answer followed by stray bytes is kept', async (t) => {
  // A gateway that sends more than its Content-Length: the answer was
  // complete when the parser met the rest.
  const base = await rawServer(
    t,
    'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nIdempotent-Replay: false\r\nContent-Length: 2\r\n\r\n{}garbage after the body',
  );
  const transport = new Transport(base, 'tok', 5_000);
  const answer = await transport.request('POST', '/x', '{}', 'k', never);
  t.equal(answer.status, 201);
  t.equal(answer.body, '{}');
  t.equal(answer.marked, true);
  transport.close();
});

void t.test('an origin with a user name or password is refused, nothing sent', (t) => {
  t.throws(() => new Transport('http://user:pw@127.0.0.1:3000', 'tok', 1_000), {
    name: 'RangeError',
    message: /user name or password/,
  });
  t.throws(() => new Transport('http://user@127.0.0.1:3000', 'tok', 1_000), RangeError);
  t.end();
});

void t.test('an error is told in one line', (t) => {
  const err = Object.assign(new Error('SSL routines:\nwrong version number\r\n'), {
    code: 'EPROTO',
  });
  t.equal(describeError(err, 1_000), 'EPROTO: SSL routines: wrong version number');
  t.end();
});

void t.test(
  'with NODE_USE_ENV_PROXY=1 requests go through HTTP_PROXY, as fetch sends them',
  async (t) => {
    const seen: string[] = [];
    const proxy = await serve(t, (req, res) => {
      seen.push(req.url ?? '');
      res.end('through the proxy');
    });
    const saved = { use: process.env['NODE_USE_ENV_PROXY'], proxy: process.env['HTTP_PROXY'] };
    t.teardown(() => {
      for (const [name, value] of [
        ['NODE_USE_ENV_PROXY', saved.use],
        ['HTTP_PROXY', saved.proxy],
      ] as const) {
        if (value === undefined) Reflect.deleteProperty(process.env, name);
        else process.env[name] = value;
      }
    });
    process.env['NODE_USE_ENV_PROXY'] = '1';
    process.env['HTTP_PROXY'] = proxy.base;
    const transport = new Transport('http://origin.invalid:8080', 'tok', 5_000);
    const answer = await transport.request('GET', '/x', null, undefined, never);
    t.equal(answer.body, 'through the proxy');
    t.same(seen, ['http://origin.invalid:8080/x'], 'the proxy was asked for the origin');
    transport.close();
  },
);

void t.test(
  "every attempt of an intent carries a traceparent of one trace, the key's hash, never the key",
  async (t) => {
    const seen: (string | undefined)[] = [];
    const { base } = await serve(t, (req, res) => {
      const header = req.headers['traceparent'];
      seen.push(typeof header === 'string' ? header : undefined);
      res.writeHead(201, { 'content-type': 'application/json' }).end('{}');
    });
    const key = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
    // Two transports: the second stands for the client started again.
    for (let i = 0; i < 2; i++) {
      const transport = new Transport(base, 'tok', 5_000);
      t.equal((await transport.request('POST', '/x', '{}', key, never)).status, 201);
      await transport.request('POST', '/x', '{}', key, never);
      transport.close();
    }
    const other = new Transport(base, 'tok', 5_000);
    await other.request('POST', '/x', '{}', '0190f2a4-1b2c-7d3e-8f40-000000000000', never);
    await other.request('GET', '/y', null, undefined, never);
    other.close();
    const parts = seen
      .slice(0, 4)
      .map((h) => /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(h ?? ''));
    t.ok(
      parts.every((p) => p !== null),
      `W3C traceparent, sampled (${seen.join(', ')})`,
    );
    t.equal(new Set(parts.map((p) => p?.[1])).size, 1, 'one trace for the intent');
    t.equal(new Set(parts.map((p) => p?.[2])).size, 4, 'a span of its own per attempt');
    t.equal(parts[0]?.[1], traceparentOf(key).split('-')[1], 'derived from the key alone');
    t.notMatch(seen.join(' '), key.replaceAll('-', ''), 'the key is not in it');
    t.not(
      /^00-([0-9a-f]{32})/.exec(seen[4] ?? '')?.[1],
      parts[0]?.[1],
      'another intent, another trace',
    );
    t.equal(seen[5], undefined, 'none without a key');
  },
);
