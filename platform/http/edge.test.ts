/**
 * Requests a front proxy may read differently from this server are refused,
 * not guessed at: two Authorization headers (Node.js keeps the first and
 * drops the rest) and a body in a Content-Encoding this server does not
 * decode. Through the real server (createHttpServer) and inject.
 */
import { Duplex } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import t, { type Test } from 'tap';
import { principalActor, type Authenticator } from '../../kernel/actor/index.js';
import { ManualClock } from '../../kernel/clock/index.js';
import { newId } from '../../kernel/ids/index.js';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import { createLogger } from '../log/index.js';
import { clientErrorHandler, clientWentAway } from './refusals.js';
import { createHttpServer, type HttpServer } from './server.js';

const alice = newId();
const authenticator: Authenticator = {
  authenticate: (token) =>
    Promise.resolve(
      token === 'alice' ? principalActor({ principalId: alice, principalKind: 'user' }) : null,
    ),
};

async function server(t: Test): Promise<{ app: HttpServer; runs: { n: number } }> {
  const app = await createHttpServer({
    logger: createLogger({ appName: 'svc', level: 'silent' }),
    bodyLimit: 4096,
    readiness: () => Promise.resolve(),
    appName: 'svc',
    apiVersion: '1',
    authenticator,
    clock: new ManualClock('2026-03-01T12:00:00Z'),
    rateLimit: { max: 10_000, windowMs: 60_000 },
    metrics: new InMemoryMetrics(),
  });
  const runs = { n: 0 };
  app.post('/api/v1/echo', { config: { idempotent: false } }, (req) => {
    runs.n++;
    return Promise.resolve({ got: req.body });
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
    t.equal(res.headers['cache-control'], 'no-store', `${url}: no-store (found by review)`);
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
    // without an error of its own, its socket gone (found by review).
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
  t.equal(
    behind.out.written,
    '',
    "no 408 that would read as the earlier request's answer (found by review)",
  );
  t.ok(behind.socket.destroyed, 'the connection is closed');
  // The request whose own body stalls gets its 408.
  const own = socketWith({ req: { complete: false } });
  clientErrorHandler(timeout(), own.socket);
  t.match(own.out.written, /^HTTP\/1\.1 408 /);
  t.end();
});
