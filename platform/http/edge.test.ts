/**
 * Requests a front proxy may read differently from this server are refused,
 * not guessed at: two Authorization headers (Node.js keeps the first and
 * drops the rest) and a body in a Content-Encoding this server does not
 * decode. Through the real server (createHttpServer) and inject.
 */
import t, { type Test } from 'tap';
import { principalActor, type Authenticator } from '../../kernel/actor/index.js';
import { ManualClock } from '../../kernel/clock/index.js';
import { newId } from '../../kernel/ids/index.js';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import { createLogger } from '../log/index.js';
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
