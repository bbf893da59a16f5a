import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { PassThrough, Writable } from 'node:stream';
import t from 'tap';
import { principalActor, type Authenticator } from '../../kernel/actor/index.js';
import { ManualClock } from '../../kernel/clock/index.js';
import { requireContext } from '../../kernel/context/index.js';
import { problem } from '../../kernel/errs/index.js';
import { newId, type Id } from '../../kernel/ids/index.js';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import { createLogger } from '../log/index.js';
import { clientErrorHandler, createHttpServer } from './server.js';

function logSink() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n'))
        if (l !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { lines, logger: createLogger({ appName: 'svc-under-test', level: 'info', stream }) };
}

const alice: Id = newId();
/** An in-memory Authenticator: one good token, one that stands for a revoked one. */
const authenticator: Authenticator = {
  authenticate: (token) =>
    Promise.resolve(
      token === 'good-token' ? principalActor({ principalId: alice, principalKind: 'user' }) : null,
    ),
};

async function server(
  readiness: () => Promise<void> = () => Promise.resolve(),
  rateLimit = { max: 1000, windowMs: 60_000 },
) {
  const sink = logSink();
  const metrics = new InMemoryMetrics();
  const app = await createHttpServer({
    logger: sink.logger,
    bodyLimit: 1024,
    readiness,
    appName: 'svc-under-test',
    apiVersion: '1.0.0',
    authenticator,
    clock: new ManualClock('2026-01-01T00:00:00Z'),
    rateLimit,
    metrics,
  });
  return { app, sink, metrics };
}

void t.test('healthz answers while the process is up', async (t) => {
  const { app } = await server();
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { status: 'ok' });
});

void t.test('readyz reflects the readiness probe', async (t) => {
  let ok = true;
  const { app } = await server(() =>
    ok ? Promise.resolve() : Promise.reject(new Error('connection refused to 10.0.0.1')),
  );
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
  ok = false;
  // A check's outcome is shared for a second (a probe flood is one query).
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 503);
  t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.equal(res.json<{ code: string }>().code, 'service_unavailable');
  t.notMatch(res.body, /10\.0\.0\.1/, 'internals stay out of the body');
});

void t.test(
  'a valid Correlation-Id is kept and echoed, anything else replaced by a UUIDv7',
  async (t) => {
    const { app, sink } = await server();
    const given = '0190F2A4-1B2C-7D3E-8F40-123456789ABC';
    const kept = await app.inject({
      method: 'GET',
      url: '/healthz',
      headers: { 'correlation-id': given },
    });
    t.equal(kept.headers['correlation-id'], given.toLowerCase());
    t.ok(
      sink.lines.some(
        (l) => l['correlation_id'] === given.toLowerCase() && l['service'] === 'svc-under-test',
      ),
      'the log line carries the correlation id and the service name',
    );
    const replaced = await app.inject({
      method: 'GET',
      url: '/healthz',
      headers: { 'correlation-id': 'x\ny' },
    });
    t.match(
      replaced.headers['correlation-id'],
      /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
  },
);

void t.test(
  'every error is problem+json with code and correlation_id, unknown errors leak nothing',
  async (t) => {
    const { app } = await server();
    app.get('/known', { config: { auth: 'none' } }, () => {
      throw problem('conflict', 'Already there.', {
        reason: 'duplicate',
        hint: 'Use another name.',
      });
    });
    app.get('/unknown', { config: { auth: 'none' } }, () => {
      throw new Error('relation "secret_table" does not exist at /srv/app.js:12');
    });
    app.get('/busy', { config: { auth: 'none' } }, () => {
      throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
    });
    const known = await app.inject({ method: 'GET', url: '/known' });
    t.equal(known.statusCode, 409);
    t.same(known.json(), {
      type: 'urn:problem-type:conflict',
      title: known.json<{ title: string }>().title,
      status: 409,
      detail: 'Already there.',
      code: 'conflict',
      correlation_id: known.headers['correlation-id'],
      reason: 'duplicate',
      hint: 'Use another name.',
    });
    const unknown = await app.inject({ method: 'GET', url: '/unknown' });
    t.equal(unknown.statusCode, 500);
    t.equal(unknown.json<{ code: string }>().code, 'internal_error');
    t.notMatch(unknown.body, /secret_table|srv|at /, 'no message, path or stack in the body');
    const busy = await app.inject({ method: 'GET', url: '/busy' });
    t.equal(busy.statusCode, 503);
    t.equal(busy.headers['retry-after'], '1');
    const missing = await app.inject({ method: 'GET', url: '/nowhere' });
    t.equal(missing.statusCode, 404);
    t.equal(missing.json<{ code: string }>().code, 'not_found');
  },
);

void t.test('authentication runs before the body is read', async (t) => {
  const { app } = await server();
  let handlerRan = false;
  app.post('/api/v1/things', { config: { auth: 'required', idempotent: false } }, () => {
    handlerRan = true;
    return { ok: true };
  });
  const res = await app.inject({
    method: 'POST',
    url: '/api/v1/things',
    headers: { 'content-type': 'application/json' },
    payload: '{not json and far too long'.padEnd(5000, 'x'),
  });
  t.equal(res.statusCode, 401, 'not 400 (parse) nor 413 (size): the body was never read');
  t.equal(res.json<{ code: string }>().code, 'unauthenticated');
  t.equal(res.headers['www-authenticate'], 'Bearer');
  t.notOk(handlerRan);
});

void t.test('auth modes: required, optional and none', async (t) => {
  const { app } = await server();
  const seen: string[] = [];
  const who = () => {
    const actor = requireContext().actor;
    seen.push(actor.kind === 'principal' ? actor.principalId : 'anonymous');
    return { ok: true };
  };
  app.get('/api/v1/required', { config: { auth: 'required' } }, who);
  app.get('/api/v1/optional', { config: { auth: 'optional' } }, who);
  app.get('/api/v1/public', { config: { auth: 'none' } }, who);
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

  t.equal(
    (await app.inject({ url: '/api/v1/required', headers: bearer('good-token') })).statusCode,
    200,
  );
  t.equal((await app.inject({ url: '/api/v1/optional' })).statusCode, 200, 'anonymous allowed');
  t.equal(
    (await app.inject({ url: '/api/v1/optional', headers: bearer('good-token') })).statusCode,
    200,
  );
  const revoked = await app.inject({ url: '/api/v1/optional', headers: bearer('revoked-token') });
  t.equal(revoked.statusCode, 401, 'a bad token is 401 even where anonymous callers are allowed');
  t.equal(revoked.headers['www-authenticate'], 'Bearer error="invalid_token"');
  const malformed = await app.inject({
    url: '/api/v1/required',
    headers: { authorization: 'Basic abc' },
  });
  t.equal(malformed.statusCode, 401);
  t.equal(malformed.headers['www-authenticate'], 'Bearer error="invalid_request"');
  t.equal(
    (await app.inject({ url: '/api/v1/public', headers: bearer('revoked-token') })).statusCode,
    200,
    'a public route never looks at the header',
  );
  t.same(seen, [alice, 'anonymous', alice, 'anonymous']);
  const unknown = await app.inject({ url: '/api/v1/nothing-here' });
  t.equal(unknown.statusCode, 404, 'an unknown route is 404 for anonymous callers too');
});

void t.test(
  'a throttled request is 429 problem+json with RateLimit headers, keyed by principal',
  async (t) => {
    const { app } = await server(undefined, { max: 2, windowMs: 60_000 });
    app.get('/api/v1/limited', { config: { auth: 'optional' } }, () => ({ ok: true }));
    const good = { authorization: 'Bearer good-token' };
    const first = await app.inject({ url: '/api/v1/limited', headers: good });
    t.equal(first.statusCode, 200);
    t.equal(first.headers['ratelimit-limit'], '2');
    t.equal(first.headers['ratelimit-remaining'], '1');
    t.equal((await app.inject({ url: '/api/v1/limited', headers: good })).statusCode, 200);
    const third = await app.inject({ url: '/api/v1/limited', headers: good });
    t.equal(third.statusCode, 429);
    t.equal(third.headers['content-type'], 'application/problem+json; charset=utf-8');
    t.equal(third.json<{ code: string }>().code, 'rate_limited');
    t.ok(Number(third.headers['retry-after']) >= 1, 'Retry-After is set');
    t.equal(third.headers['ratelimit-remaining'], '0');
    t.equal(
      (await app.inject({ url: '/api/v1/limited' })).statusCode,
      200,
      'an anonymous caller (by address) has a budget of its own',
    );
    t.equal((await app.inject({ url: '/healthz' })).statusCode, 200, 'probes are not throttled');
  },
);

void t.test('bodies: JSON only (415), within the limit (413), valid (400)', async (t) => {
  const { app } = await server();
  app.post('/api/v1/echo', { config: { auth: 'none', idempotent: false } }, (req) => ({
    got: req.body,
  }));
  const text = await app.inject({
    method: 'POST',
    url: '/api/v1/echo',
    headers: { 'content-type': 'text/plain' },
    payload: 'hello',
  });
  t.equal(text.statusCode, 415);
  t.equal(text.json<{ code: string }>().code, 'unsupported_media_type');
  const big = await app.inject({
    method: 'POST',
    url: '/api/v1/echo',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({ s: 'x'.repeat(2000) }),
  });
  t.equal(big.statusCode, 413);
  t.equal(big.json<{ code: string }>().code, 'payload_too_large');
  const broken = await app.inject({
    method: 'POST',
    url: '/api/v1/echo',
    headers: { 'content-type': 'application/json' },
    payload: '{"a":',
  });
  t.equal(broken.statusCode, 400);
  t.same(broken.json<{ errors: unknown }>().errors, [{ pointer: '#body', code: 'invalid_json' }]);
});

void t.test('requests are counted by route and status', async (t) => {
  const { app, metrics } = await server();
  await app.inject({ url: '/healthz' });
  await app.inject({ url: '/healthz' });
  await app.inject({ url: '/nowhere' });
  t.equal(
    metrics.value('http_requests_total', { method: 'GET', route: '/healthz', status: 200 }),
    2,
  );
  t.equal(
    metrics.value('http_requests_total', { method: 'GET', route: 'unmatched', status: 404 }),
    1,
  );
});

void t.test('the API document is generated and its UI is public', async (t) => {
  const { app } = await server();
  app.post(
    '/api/v1/widgets',
    { config: { auth: 'required', idempotent: false }, schema: { operationId: 'createWidget' } },
    () => ({ ok: true }),
  );
  await app.ready();
  const doc = app.swagger() as { info: { title: string }; paths: Record<string, unknown> };
  t.equal(doc.info.title, 'svc-under-test');
  t.ok(doc.paths['/api/v1/widgets'], 'the route is documented');
  t.notOk(doc.paths['/healthz'], 'probes are hidden');
  const ui = await app.inject({ url: '/docs/' });
  t.equal(ui.statusCode, 200, 'the UI needs no token');
  t.match(ui.headers['content-type'], /text\/html/);
});

void t.test(
  'what the HTTP parser refuses is answered by its kind: 408 for a slow head, 413 for oversized chunk extensions, 400 otherwise',
  (t) => {
    const answer = (code: string): string => {
      let written = '';
      const socket = Object.assign(new PassThrough(), {
        end: (chunk: string, cb?: () => void) => {
          written = chunk;
          cb?.();
          return socket;
        },
      });
      clientErrorHandler(Object.assign(new Error(code), { code }), socket);
      return written;
    };
    const timeout = answer('ERR_HTTP_REQUEST_TIMEOUT');
    t.match(timeout, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    t.match(timeout, /"code":"request_timeout"/);
    t.match(answer('HPE_CHUNK_EXTENSIONS_OVERFLOW'), /^HTTP\/1\.1 413 /);
    t.match(answer('HPE_HEADER_OVERFLOW'), /^HTTP\/1\.1 431 /);
    t.match(
      answer('HPE_INVALID_HEADER_TOKEN'),
      /^HTTP\/1\.1 400 .*"pointer":"#","code":"malformed_request"/s,
    );
    t.end();
  },
);

/** One answer read over a real socket: status, headers and body. */
interface RawAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/**
 * Sends one request over a real socket, path as given (no normalisation,
 * as `curl --path-as-is` does), and reads the whole answer.
 */
function rawGet(port: number, path: string, headers: Record<string, string> = {}) {
  return new Promise<RawAnswer>((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

void t.test(
  'bad paths and ranges under /docs/static/ are 4xx problems with their status, never 5xx, logged below error',
  async (t) => {
    const { app, sink } = await server();
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.teardown(() => app.close());
    const port = (app.server.address() as AddressInfo).port;
    const cases: [string, Record<string, string>, number, string][] = [
      ['/docs/static/../package.json', {}, 403, 'forbidden_path'],
      ['/docs/static/%00', {}, 403, 'forbidden_path'],
      ['/docs/static/.', {}, 403, 'forbidden_path'],
      ['/docs/static//etc/passwd', {}, 403, 'forbidden_path'],
      [`/docs/static/${'a'.repeat(300)}`, {}, 403, 'forbidden_path'],
      ['/docs/static/swagger-ui.css', { range: 'bytes=999999999-' }, 416, 'range_not_satisfiable'],
      ['/docs/static/swagger-ui.css', { range: 'bytes=-0' }, 416, 'range_not_satisfiable'],
    ];
    const css = await rawGet(port, '/docs/static/swagger-ui.css');
    t.equal(css.status, 200, 'the file itself is served');
    for (const [path, headers, status, code] of cases) {
      const label = `${path.slice(0, 40)} ${JSON.stringify(headers)}`;
      const res = await rawGet(port, path, headers);
      t.equal(res.status, status, label);
      t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8', label);
      const body = JSON.parse(res.body) as { code: string; status: number; correlation_id: string };
      t.equal(body.code, code, label);
      t.equal(body.status, status, label);
      t.equal(body.correlation_id, res.headers['correlation-id'], label);
      if (status === 416) {
        t.equal(
          res.headers['content-range'],
          `bytes */${String(css.headers['content-length'])}`,
          label,
        );
      }
    }
    const errors = sink.lines.filter((l) => typeof l['level'] === 'number' && l['level'] >= 50);
    t.same(errors, [], 'nothing is logged at error level');
  },
);

void t.test(
  'every answer under /api/ carries Cache-Control: no-store, and so do the probes',
  async (t) => {
    const { app } = await server();
    app.get('/api/v1/thing', { config: { auth: 'none' } }, () => ({ ok: true }));
    app.get('/api/v1/broken', { config: { auth: 'none' } }, () => {
      throw new Error('boom');
    });
    app.get('/api/v1/private', { config: { auth: 'required' } }, () => ({ ok: true }));
    const urls = [
      '/api/v1/thing',
      '/api/v1/thing?x=1',
      '/api/v1/broken',
      '/api/v1/private',
      '/api/v1/nowhere',
      '/healthz',
      '/readyz',
    ];
    for (const url of urls) {
      const res = await app.inject({ url });
      t.equal(res.headers['cache-control'], 'no-store', url);
    }
    const doc = await app.inject({ url: '/docs/json' });
    t.equal(doc.statusCode, 200);
    t.not(doc.headers['cache-control'], 'no-store', 'the API document may be cached');
  },
);

void t.test(
  'a client that goes away mid-request is logged below error, without a stack',
  async (t) => {
    const { app, sink } = await server();
    let handlerRan = false;
    app.post('/api/v1/upload', { config: { auth: 'none', idempotent: false } }, () => {
      handlerRan = true;
      return { ok: true };
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.teardown(() => app.close());
    const port = (app.server.address() as AddressInfo).port;
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', resolve));
    socket.write(
      'POST /api/v1/upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        'Content-Length: 100\r\n\r\n{"name":',
    );
    // Wait until the server holds the request (its line is logged), then
    // reset the connection as a client that crashed or lost its network would.
    const deadline = Date.now() + 5000;
    while (!sink.lines.some((l) => l['msg'] === 'incoming request') && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    socket.resetAndDestroy();
    const settled = (): Record<string, unknown> | undefined =>
      sink.lines.find(
        (l) =>
          l['msg'] !== 'incoming request' &&
          l['msg'] !== 'request completed' &&
          typeof l['correlation_id'] === 'string',
      );
    while (settled() === undefined && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const line = settled();
    t.ok(line, 'the lost request is logged');
    t.ok(typeof line?.['level'] === 'number' && line['level'] < 50, 'below error');
    t.notOk(JSON.stringify(line).includes('"stack"'), 'without a stack');
    const errors = sink.lines.filter((l) => typeof l['level'] === 'number' && l['level'] >= 50);
    t.same(errors, [], 'nothing is logged at error level');
    t.notOk(handlerRan, 'the handler never ran: the body never arrived');
  },
);
