/**
 * Requests a front proxy may read differently from this server are refused,
 * not guessed at: two Authorization headers (Node.js keeps the first and
 * drops the rest) and a body in a Content-Encoding this server does not
 * decode. Through the real server (createHttpServer) and inject.
 */
import net from 'node:net';
import { Duplex } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import t, { type Test } from 'tap';
import { principalActor, type Authenticator } from '../../kernel/actor/index.js';
import { newId } from '../../kernel/ids/index.js';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import { createLogger } from '../log/index.js';
import { testServerOptions } from '../../test/harness/http-server.js';
import { clientErrorHandler, clientWentAway } from './refusals.js';
import { createHttpServer, type HttpServer, type HttpServerOptions } from './server.js';

const alice = newId();
const authenticator: Authenticator = {
  authenticate: (token) =>
    Promise.resolve(
      token === 'alice' ? principalActor({ principalId: alice, principalKind: 'user' }) : null,
    ),
};

/** The options every server of this file shares, with a test's own on top. */
function serverOptions(overrides: Partial<HttpServerOptions>): HttpServerOptions {
  return testServerOptions({ authenticator, ...overrides });
}

async function server(
  t: Test,
  rateLimitMax = 10_000,
  maxPipelinedRequests?: number,
): Promise<{ app: HttpServer; runs: { n: number } }> {
  const app = await createHttpServer(
    serverOptions({
      ...(maxPipelinedRequests === undefined ? {} : { maxPipelinedRequests }),
      rateLimit: { max: rateLimitMax, windowMs: 60_000 },
    }),
  );
  const runs = { n: 0 };
  app.post('/api/v1/echo', { config: { idempotent: false } }, (req) => {
    runs.n++;
    return Promise.resolve({ got: req.body });
  });
  app.get('/api/v1/things/:id', (_req, reply) => {
    runs.n++;
    return reply.header('etag', '"3"').send({ id: 'thing', version: 3 });
  });
  app.delete('/api/v1/things/:id', { config: { idempotent: false } }, () => {
    runs.n++;
    return Promise.resolve({ deleted: true });
  });
  await app.ready();
  t.teardown(() => app.close());
  return { app, runs };
}

void t.test('two Authorization headers are refused, whichever comes first', async (t) => {
  const { app, runs } = await server(t);
  for (const pair of [
    ['Bearer alice', 'Bearer mallory'],
    ['Bearer mallory', 'Bearer alice'],
    ['Bearer alice', 'Bearer alice'],
  ]) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/v1/echo',
      // inject sends an array as that many header lines.
      headers: { 'content-type': 'application/json', authorization: pair } as unknown as Record<
        string,
        string
      >,
      payload: '{}',
    });
    t.equal(res.statusCode, 401, pair.join(' + '));
    t.equal(res.headers['www-authenticate'], 'Bearer error="invalid_request"');
    t.match(res.json<{ code: string; detail: string }>(), {
      code: 'unauthenticated',
      detail: /one Authorization header/,
    });
  }
  t.equal(runs.n, 0, 'the handler never ran');
  const one = await app.inject({
    method: 'POST',
    url: '/api/v1/echo',
    headers: { 'content-type': 'application/json', authorization: 'Bearer alice' },
    payload: '{}',
  });
  t.equal(one.statusCode, 200, 'one header is fine');
});

void t.test('a body in a Content-Encoding the server does not decode is 415', async (t) => {
  const { app, runs } = await server(t);
  for (const encoding of ['gzip', 'br', 'deflate', 'identity, gzip', 'GZIP']) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/v1/echo',
      headers: {
        'content-type': 'application/json',
        'content-encoding': encoding,
        authorization: 'Bearer alice',
      },
      payload: '{"a":1}',
    });
    t.equal(res.statusCode, 415, encoding);
    t.match(res.json<{ code: string }>(), { code: 'unsupported_media_type' });
  }
  t.equal(runs.n, 0);
  const identity = await app.inject({
    method: 'POST',
    url: '/api/v1/echo',
    headers: {
      'content-type': 'application/json',
      'content-encoding': 'identity',
      authorization: 'Bearer alice',
    },
    payload: '{"a":1}',
  });
  t.equal(identity.statusCode, 200, 'identity is no encoding');
  t.same(identity.json(), { got: { a: 1 } });
});

void t.test('no-store is decided by the answering route, not the URL as sent', async (t) => {
  const { app } = await server(t);
  for (const url of ['/api/v1/echo', '/%61pi/v1/echo', '/%61%70%69/v1/echo']) {
    const res = await app.inject({
      method: 'POST',
      url,
      headers: { 'content-type': 'application/json', authorization: 'Bearer alice' },
      payload: '{}',
    });
    t.equal(res.statusCode, 200, url);
    t.equal(res.headers['cache-control'], 'no-store', `${url}: no-store`);
  }
  const missing = await app.inject({ method: 'GET', url: '/%61pi/nothing' });
  t.equal(missing.statusCode, 404);
  t.equal(missing.headers['cache-control'], 'no-store', 'an unmatched path too');
  const doc = await app.inject({ method: 'GET', url: '/docs/json' });
  t.equal(doc.statusCode, 200);
  t.not(doc.headers['cache-control'], 'no-store', 'the API document keeps its own caching');
});

void t.test(
  'a reset from the database is no client going away, even when the client left too',
  (t) => {
    // The request object as the error handler sees it: its stream ended
    // without an error of its own, its socket gone.
    const gone = {
      raw: { errored: null, destroyed: true, complete: false, socket: { destroyed: true } },
    };
    const fromPg = Object.assign(new Error('read ECONNRESET'), {
      code: 'ECONNRESET',
      severity: 'FATAL',
    });
    t.equal(
      clientWentAway(fromPg, gone as unknown as FastifyRequest),
      false,
      'a pool error stays a server error',
    );
    const own = Object.assign(new Error('aborted'), { code: 'ECONNRESET' });
    const withOwn = { raw: { ...gone.raw, errored: own } };
    t.equal(
      clientWentAway(own, withOwn as unknown as FastifyRequest),
      true,
      "the request stream's own error",
    );
    const closed = Object.assign(new Error('closed'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });
    t.equal(clientWentAway(closed, gone as unknown as FastifyRequest), true, 'a body cut short');
    t.end();
  },
);

void t.test('a parser refusal behind a request still being answered writes nothing', (t) => {
  const socketWith = (pending: unknown) => {
    const out = { written: '' };
    const socket = new Duplex({
      read() {
        return undefined;
      },
      write(chunk: Buffer, _encoding, callback) {
        out.written += chunk.toString();
        callback();
      },
    });
    Object.assign(socket, { _httpMessage: pending });
    return { socket, out };
  };
  const timeout = () => Object.assign(new Error('timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });
  // A pipelined request, received whole, is still being answered.
  const behind = socketWith({ req: { complete: true } });
  clientErrorHandler(timeout(), behind.socket);
  t.equal(behind.out.written, '', "no 408 that would read as the earlier request's answer");
  t.ok(behind.socket.destroyed, 'the connection is closed');
  // The request whose own body stalls gets its 408.
  const own = socketWith({ req: { complete: false } });
  clientErrorHandler(timeout(), own.socket);
  t.match(own.out.written, /^HTTP\/1\.1 408 /);
  t.end();
});

void t.test('anonymous callers are rate limited by address, whatever they send', async (t) => {
  const { app, runs } = await server(t, 3);
  const bogus = { authorization: 'Bearer mallory' };
  for (const [name, method, url, headers] of [
    ['a bad token', 'POST', '/api/v1/echo', bogus],
    ['no token', 'POST', '/api/v1/echo', {}],
    ['Basic auth', 'POST', '/api/v1/echo', { authorization: 'Basic YTpi' }],
    ['an unknown path', 'GET', '/nothing/here', {}],
    ['the API document', 'GET', '/docs/json', {}],
  ] as const) {
    // Each case from an address of its own (inject's remoteAddress).
    const remoteAddress = `10.0.0.${String(name.length)}`;
    const answers = [];
    for (let i = 0; i < 5; i++) {
      answers.push(await app.inject({ method, url, headers, remoteAddress }));
    }
    const first = answers[0];
    t.ok(first !== undefined && first.statusCode !== 429, `${name}: the first is answered`);
    t.equal(first?.headers['ratelimit-limit'], '3', `${name}: RateLimit headers`);
    const last = answers[4];
    t.equal(last?.statusCode, 429, `${name}: the fifth is 429`);
    t.match(last?.json(), { code: 'rate_limited' }, `${name}: a problem`);
    t.ok(Number(last?.headers['retry-after']) >= 1, `${name}: Retry-After`);
  }
  t.equal(runs.n, 0, 'no handler ran');
  // A principal on an exhausted address has its own counter.
  const alices = await app.inject({
    method: 'POST',
    url: '/api/v1/echo',
    headers: { 'content-type': 'application/json', authorization: 'Bearer alice' },
    payload: '{}',
    remoteAddress: '10.0.0.7',
  });
  t.equal(alices.statusCode, 200, "a principal's counter is not the address's");
  // Probes stay exempt: a load balancer polls from one address.
  for (let i = 0; i < 5; i++) {
    const probe = await app.inject({ method: 'GET', url: '/healthz', remoteAddress: '10.0.0.7' });
    t.equal(probe.statusCode, 200, `probe ${String(i)}`);
  }
});

void t.test('a known path with another method is 405 with Allow', async (t) => {
  const { app, runs } = await server(t);
  for (const [method, url, allow] of [
    ['PUT', '/api/v1/echo', 'POST'],
    ['GET', '/api/v1/echo', 'POST'],
    ['POST', '/api/v1/things/abc', 'DELETE, GET, HEAD'],
    ['PATCH', '/api/v1/things/abc', 'DELETE, GET, HEAD'],
  ] as const) {
    const res = await app.inject({ method, url, headers: { authorization: 'Bearer alice' } });
    t.equal(res.statusCode, 405, `${method} ${url}`);
    t.equal(res.headers['allow'], allow, `${method} ${url}: Allow`);
    t.match(res.json(), { code: 'method_not_allowed', status: 405 });
    t.ok(res.headers['correlation-id'], 'with a correlation id');
  }
  const anonymous = await app.inject({ method: 'PUT', url: '/api/v1/echo' });
  t.equal(anonymous.statusCode, 405, 'as for an unknown path, no token is needed to learn it');
  const unknown = await app.inject({ method: 'PUT', url: '/api/v1/nothing' });
  t.equal(unknown.statusCode, 404, 'an unknown path stays 404');
  t.equal(unknown.headers['allow'], undefined);
  t.equal(runs.n, 0);
});

void t.test('If-None-Match with the current ETag is 304 on a read', async (t) => {
  const { app } = await server(t);
  const get = (inm: string | undefined, method: 'GET' | 'HEAD' = 'GET') =>
    app.inject({
      method,
      url: '/api/v1/things/abc',
      headers: {
        authorization: 'Bearer alice',
        ...(inm === undefined ? {} : { 'if-none-match': inm }),
      },
    });
  for (const inm of ['"3"', 'W/"3"', '"1", "3"', '*', ' "3" ']) {
    const res = await get(inm);
    t.equal(res.statusCode, 304, `If-None-Match: ${inm}`);
    t.equal(res.body, '', 'no body');
    t.equal(res.headers['etag'], '"3"', 'the ETag is repeated');
    t.equal(res.headers['cache-control'], 'no-store');
    t.equal(
      res.headers['content-length'],
      String(Buffer.byteLength(JSON.stringify({ id: 'thing', version: 3 }))),
      "a Content-Length only as the 200's (RFC 9110 section 8.6)",
    );
    t.equal(res.headers['content-type'], undefined, 'no Content-Type');
  }
  t.equal((await get('"3"', 'HEAD')).statusCode, 304, 'HEAD too');
  for (const inm of ['"4"', 'W/"4"', '"33"', '3']) {
    const res = await get(inm);
    t.equal(res.statusCode, 200, `If-None-Match: ${inm} does not match`);
    t.same(res.json(), { id: 'thing', version: 3 });
  }
  t.equal((await get(undefined)).statusCode, 200, 'no condition');
});

/** Sends raw bytes on a fresh connection and collects the answer until the server closes. */
async function raw(port: number, bytes: string, deadlineMs?: number): Promise<string> {
  const socket = net.connect(port, '127.0.0.1');
  let answer = '';
  const seen = { ended: false };
  socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
  socket.on('error', () => undefined);
  socket.on('end', () => (seen.ended = true));
  // With a deadline: the answer ends in NUL + "closed" when the server
  // closed the connection before it, so a test can tell.
  const timer =
    deadlineMs === undefined ? undefined : setTimeout(() => socket.destroy(), deadlineMs);
  socket.write(bytes);
  await new Promise((resolve) => socket.on('close', resolve));
  clearTimeout(timer);
  return deadlineMs !== undefined && seen.ended ? `${answer}\u0000closed` : answer;
}

void t.test('framing a front proxy may read otherwise is refused with a problem', async (t) => {
  const { app, runs } = await server(t);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  // No Connection: close from the client: the server must close by itself.
  const post = (head: string, body = '{}') =>
    `POST /api/v1/echo HTTP/1.1\r\n${head}Content-Type: application/json\r\n` +
    `Authorization: Bearer alice\r\n\r\n${body}`;
  for (const [name, bytes, pointer, code] of [
    ['no Host', post('Content-Length: 2\r\n'), '#header/Host', 'required'],
    [
      'two Host headers',
      post('Host: a\r\nHost: b\r\nContent-Length: 2\r\n'),
      '#header/Host',
      'duplicate',
    ],
    [
      'a transfer coding besides chunked',
      post('Host: x\r\nTransfer-Encoding: gzip, chunked\r\n', '2\r\n{}\r\n0\r\n\r\n'),
      '#header/Transfer-Encoding',
      'unsupported',
    ],
    [
      'HTTP/2.0 in the request line',
      post('Host: x\r\nContent-Length: 2\r\n').replace('HTTP/1.1', 'HTTP/2.0'),
      '#',
      'malformed_request',
    ],
    ['CONNECT', 'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n', '#method', 'unsupported'],
    // A Host that is no host[:port] may name another host to a proxy in front.
    ['a Host with userinfo', post('Host: a@b\r\nContent-Length: 2\r\n'), '#header/Host', 'invalid'],
    ['a Host list', post('Host: a, b\r\nContent-Length: 2\r\n'), '#header/Host', 'invalid'],
    // A fragment never travels in a request (RFC 9112 section 3.2).
    [
      'a fragment in the target',
      post('Host: x\r\nContent-Length: 2\r\n').replace('/api/v1/echo', '/api/v1/echo#frag'),
      '#path',
      'invalid',
    ],
    [
      'HTTP/1.0 with a transfer coding',
      post('Transfer-Encoding: chunked\r\n', '2\r\n{}\r\n0\r\n\r\n').replace(
        'HTTP/1.1',
        'HTTP/1.0',
      ),
      '#header/Transfer-Encoding',
      'unsupported',
    ],
    [
      'two Host headers on a path the router cannot read',
      'GET /%zz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n',
      '#header/Host',
      'duplicate',
    ],
    [
      'a transfer coding on a path the router cannot read',
      'POST /%zz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n',
      '#header/Transfer-Encoding',
      'unsupported',
    ],
  ] as const) {
    const answer = await raw(port, bytes, 3000);
    t.ok(answer.endsWith('\u0000closed'), `${name}: the server closed the connection`);
    t.match(answer, /^HTTP\/1\.1 400 /, `${name}: 400`);
    t.match(answer, /\r\ncorrelation-id: [0-9a-f-]{36}\r\n/i, `${name}: a correlation id`);
    const body = answer.slice(answer.indexOf('\r\n\r\n') + 4).replace('\u0000closed', '');
    t.match(
      JSON.parse(body),
      { code: 'validation_failed', errors: [{ pointer, code }] },
      `${name}: the problem names ${pointer}`,
    );
  }
  t.equal(runs.n, 0, 'no handler ran');
  const fine = await raw(port, post('Host: x\r\nContent-Length: 2\r\nConnection: close\r\n'));
  t.match(fine, /^HTTP\/1\.1 200 /, 'a plain request is served');
  const chunked = await raw(
    port,
    post('Host: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n', '2\r\n{}\r\n0\r\n\r\n'),
  );
  t.match(chunked, /^HTTP\/1\.1 200 /, 'chunked alone is served');
});

void t.test('a connection with too many requests awaiting answers is closed', async (t) => {
  const { app, runs } = await server(t, 10_000, 2);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  const one = 'GET /api/v1/things/a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n\r\n';
  const answer = await raw(port, one.repeat(10));
  const answered = answer.split('HTTP/1.1 200').length - 1;
  t.ok(answered <= 2, `at most the limit answered (${String(answered)})`);
  t.ok(runs.n <= 2, `and run (${String(runs.n)})`);
  // Within the limit, pipelining works.
  const two = await raw(port, one + one.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n'));
  t.equal(two.split('HTTP/1.1 200').length - 1, 2, 'two pipelined requests are both answered');
});

void t.test(
  'requests over the pipelining limit are never parsed, the close told once',
  async (t) => {
    const lines: Record<string, unknown>[] = [];
    const stream = {
      write: (line: string) => {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      },
    };
    const metrics = new InMemoryMetrics();
    const app = await createHttpServer(
      serverOptions({
        logger: createLogger({ appName: 'svc', level: 'info', stream }),
        metrics,
        maxPipelinedRequests: 2,
      }),
    );
    app.get('/api/v1/things/:id', () => Promise.resolve({ id: 'thing' }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    t.teardown(() => app.close());
    const port = (app.server.address() as net.AddressInfo).port;
    // Node.js's own count of the requests it parsed and dispatched.
    let parsed = 0;
    app.server.on('request', () => parsed++);
    const one = 'GET /api/v1/things/a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n\r\n';
    await raw(port, one.repeat(300));
    t.ok(parsed <= 2, `at most the limit parsed, of 300 in one write (${String(parsed)})`);
    const told = lines.filter((l) => l['msg'] === 'pipelining limit: connection closed');
    t.equal(told.length, 1, 'one log line for the connection');
    t.equal(metrics.value('http_pipelining_closed_total'), 1, 'counted once');
  },
);

void t.test('a body holding a blank line is not taken for a pipelined request', async (t) => {
  const { app, runs } = await server(t, 10_000, 1);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  const body = '{\r\n\r\n"a":\r\n\r\n1}';
  const answer = await raw(
    port,
    'POST /api/v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n' +
      `Content-Type: application/json\r\nContent-Length: ${String(body.length)}\r\n` +
      `Connection: close\r\n\r\n${body}`,
  );
  t.match(answer, /^HTTP\/1\.1 200 /, 'answered');
  t.match(answer, /"got":\{"a":1\}/, 'with the whole body');
  t.equal(runs.n, 1);
});

void t.test('a client still writing a body over the limit reads the 413', async (t) => {
  const { app, runs } = await server(t);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  // Loopback takes about 4 MiB before a writer blocks: past that, a close
  // at once reached the client as EPIPE ("fetch failed"), not the answer.
  for (const size of [1, 4, 8, 12]) {
    const res = await fetch(`http://127.0.0.1:${String(port)}/api/v1/echo`, {
      method: 'POST',
      headers: { authorization: 'Bearer alice', 'content-type': 'application/json' },
      body: Buffer.alloc(size * 2 ** 20, 32),
    });
    t.equal(res.status, 413, `${String(size)} MiB: 413`);
    t.equal(((await res.json()) as { code?: string }).code, 'payload_too_large');
    // And sent without a length (chunked), so the limit is met while reading.
    const piece = Buffer.alloc(2 ** 16, 32);
    let left = size * 16;
    const stream = new ReadableStream<Uint8Array>({
      pull: (controller) => {
        if (left-- > 0) controller.enqueue(piece);
        else controller.close();
      },
    });
    const chunked = await fetch(`http://127.0.0.1:${String(port)}/api/v1/echo`, {
      method: 'POST',
      headers: { authorization: 'Bearer alice', 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    });
    t.equal(chunked.status, 413, `${String(size)} MiB chunked: 413`);
  }
  t.equal(runs.n, 0, 'no handler ran');
});

void t.test('a CONNECT whose client resets at once crashes nothing', async (t) => {
  const { app } = await server(t);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown) => uncaught.push(err);
  process.on('uncaughtException', onUncaught);
  t.teardown(() => process.off('uncaughtException', onUncaught));
  for (let i = 0; i < 50; i++) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    socket.write('CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n');
    socket.resetAndDestroy();
  }
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.same(uncaught, [], 'no uncaught error');
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200, 'still serving');
});

void t.test('Allow names only methods whose route would take the path', async (t) => {
  const { app } = await server(t);
  const long = 'x'.repeat(200);
  const res = await app.inject({ method: 'PUT', url: `/api/v1/things/${long}` });
  t.equal(res.statusCode, 404, 'a parameter over the router limit matches no route');
  t.equal(res.headers['allow'], undefined);
});

void t.test('after the limit of refused tokens, no token is looked up', async (t) => {
  const looked = { n: 0 };
  const app = await createHttpServer(
    serverOptions({
      authenticator: {
        authenticate: (token) => {
          looked.n++;
          return authenticator.authenticate(token, new Date());
        },
      },
      rateLimit: { max: 3, windowMs: 60_000 },
    }),
  );
  app.get('/api/v1/who', () => Promise.resolve({ ok: true }));
  await app.ready();
  t.teardown(() => app.close());
  const get = (token: string, remoteAddress: string) =>
    app.inject({
      method: 'GET',
      url: '/api/v1/who',
      headers: { authorization: `Bearer ${token}` },
      remoteAddress,
    });
  const statuses = [];
  for (let i = 0; i < 10; i++) statuses.push((await get('mallory', '10.1.0.1')).statusCode);
  t.same(statuses, [401, 401, 401, 429, 429, 429, 429, 429, 429, 429]);
  t.equal(looked.n, 3, 'only the guesses within the limit were looked up');
  const valid = await get('alice', '10.1.0.1');
  t.equal(valid.statusCode, 429, 'a valid token from that address learns nothing either');
  t.equal(looked.n, 3);
  t.ok(Number(valid.headers['retry-after']) >= 1, 'with Retry-After');
  t.equal((await get('alice', '10.1.0.2')).statusCode, 200, 'another address is served');
  // IPv6 addresses of one /64 share a bucket.
  const v6 = [];
  for (let i = 1; i <= 5; i++) v6.push((await get('mallory', `2001:db8::${String(i)}`)).statusCode);
  t.same(v6, [401, 401, 401, 429, 429], 'one /64, one bucket');
});

void t.test('a request whose client left before its body was read is finished', async (t) => {
  // The client goes away while the authentication lookup is pending.
  let release: () => void = () => undefined;
  const pending = new Promise<void>((resolve) => (release = resolve));
  const app = await createHttpServer(
    serverOptions({
      authenticator: {
        authenticate: async (token) => {
          await pending;
          return authenticator.authenticate(token, new Date());
        },
      },
      rateLimit: { max: 1000, windowMs: 60_000 },
    }),
  );
  // onSend, not onResponse: an answer to a closed socket never finishes.
  const finished: number[] = [];
  app.addHook('onSend', (_req, reply, payload, done) => {
    finished.push(reply.statusCode);
    done(null, payload);
  });
  app.post('/api/v1/echo', { config: { idempotent: false } }, (req) =>
    Promise.resolve({ got: req.body }),
  );
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const port = (app.server.address() as net.AddressInfo).port;
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(
    'POST /api/v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n' +
      'Content-Type: application/json\r\nContent-Length: 10\r\n\r\n{"a"',
  );
  await new Promise((resolve) => setTimeout(resolve, 100));
  socket.destroy();
  await new Promise((resolve) => setTimeout(resolve, 100));
  release();
  const deadline = Date.now() + 3000;
  while (finished.length === 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  t.same(finished, [400], 'answered (to nobody), not left hanging');
});

void t.test('a flood of readiness probes is one check a second', async (t) => {
  const checks = { n: 0 };
  const app = await createHttpServer(
    serverOptions({
      readiness: async () => {
        checks.n++;
        await new Promise((resolve) => setTimeout(resolve, 20));
      },
      rateLimit: { max: 10, windowMs: 60_000 },
    }),
  );
  await app.ready();
  t.teardown(() => app.close());
  const answers = await Promise.all(
    Array.from({ length: 50 }, () => app.inject({ method: 'GET', url: '/readyz' })),
  );
  t.ok(
    answers.every((a) => a.statusCode === 200),
    'all ready, none rate limited',
  );
  t.equal(checks.n, 1, 'one check for all of them');
});

void t.test("many addresses do not reset a principal's counter", async (t) => {
  const { app } = await server(t, 3);
  const alice = () =>
    app.inject({
      method: 'GET',
      url: '/api/v1/things/a',
      headers: { authorization: 'Bearer alice' },
      remoteAddress: '10.9.0.1',
    });
  for (let i = 0; i < 3; i++) t.equal((await alice()).statusCode, 200);
  t.equal((await alice()).statusCode, 429, 'the principal is over its limit');
  for (let i = 0; i < 6000; i++) {
    await app.inject({
      method: 'GET',
      url: '/nothing',
      remoteAddress: `10.${String(i >> 16)}.${String((i >> 8) & 255)}.${String(i & 255)}`,
    });
  }
  t.equal((await alice()).statusCode, 429, 'still over it after 6,000 other addresses');
});

void t.test('one answer to a request whose transfer coding is refused', async (t) => {
  const { app } = await server(t);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  const answer = await raw(
    port,
    'POST /api/v1/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      'Transfer-Encoding: gzip\r\n\r\nsome bytes',
    3000,
  );
  t.equal(answer.split('HTTP/1.1 ').length - 1, 1, `one answer: ${answer.slice(0, 200)}`);
  t.match(answer, /^HTTP\/1\.1 400 /);
});

void t.test('answers written before routing carry no-store and Date', async (t) => {
  const { app } = await server(t);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  for (const [name, bytes] of [
    ['CONNECT', 'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n'],
    ['a head over the limit', `GET / HTTP/1.1\r\nHost: x\r\nX: ${'a'.repeat(20_000)}\r\n\r\n`],
    ['a control character', 'GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\u0001b\r\n\r\n'],
    ['an unmet expectation', 'GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n'],
  ] as const) {
    const answer = await raw(port, bytes, 3000);
    t.match(answer, /\r\ncache-control: no-store\r\n/i, `${name}: no-store`);
    t.match(answer, /\r\ndate: [A-Z][a-z]{2}, \d{2} /i, `${name}: Date`);
  }
});

void t.test('a missing file of a route that exists is 404, not 405', async (t) => {
  const { app } = await server(t);
  for (const url of ['/docs/static/nothing.js', '/docs/static/INDEX.CSS']) {
    const res = await app.inject({ method: 'GET', url });
    t.equal(res.statusCode, 404, url);
    t.equal(res.headers['allow'], undefined);
  }
});

void t.test('pipelined requests on one connection run one at a time', async (t) => {
  const app = await createHttpServer(
    serverOptions({
      rateLimit: { max: 1000, windowMs: 60_000 },
    }),
  );
  const running = { now: 0, most: 0, done: 0 };
  app.get('/api/v1/slow', { config: { auth: 'none' } }, async () => {
    running.now++;
    running.most = Math.max(running.most, running.now);
    await new Promise((resolve) => setTimeout(resolve, 30));
    running.now--;
    running.done++;
    return { ok: true };
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const port = (app.server.address() as net.AddressInfo).port;
  const one = 'GET /api/v1/slow HTTP/1.1\r\nHost: x\r\n\r\n';
  const answer = await raw(
    port,
    one.repeat(4) + one.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n'),
  );
  t.equal(answer.split('HTTP/1.1 200').length - 1, 5, 'all five answered, in order');
  t.equal(running.most, 1, 'never two at once on one connection');
});
