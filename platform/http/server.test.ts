import { Writable } from 'node:stream';
import t from 'tap';
import { problem } from '../../kernel/errs/index.js';
import { createLogger } from '../log/index.js';
import { createHttpServer } from './server.js';

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

function server(readiness: () => Promise<void> = () => Promise.resolve()) {
  const sink = logSink();
  const app = createHttpServer({ logger: sink.logger, bodyLimit: 1024, readiness });
  return { app, sink };
}

void t.test('healthz answers while the process is up', async (t) => {
  const { app } = server();
  const res = await app.inject({ method: 'GET', url: '/healthz' });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { status: 'ok' });
});

void t.test('readyz reflects the readiness probe', async (t) => {
  let ok = true;
  const { app } = server(() =>
    ok ? Promise.resolve() : Promise.reject(new Error('connection refused to 10.0.0.1')),
  );
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
  ok = false;
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 503);
  t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.equal(res.json<{ code: string }>().code, 'service_unavailable');
  t.notMatch(res.body, /10\.0\.0\.1/, 'internals stay out of the body');
});

void t.test(
  'a valid Correlation-Id is kept and echoed, anything else replaced by a UUIDv7',
  async (t) => {
    const { app, sink } = server();
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
    const { app } = server();
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
