import t from 'tap';
import Fastify from 'fastify';
import { problem } from '../../kernel/errs/index.js';
import { PROBLEM_CONTENT_TYPE, sendProblem } from './problem-reply.js';

void t.test('sendProblem writes the status, Retry-After, extra headers and the body', async (t) => {
  const app = Fastify();
  t.teardown(() => app.close());
  app.get('/', (_req, reply) =>
    sendProblem(
      reply,
      problem('request_in_progress', 'still running', {
        retryAfterSeconds: 1,
        headers: { 'x-extra': 'yes' },
      }),
      'corr-1',
    ),
  );
  const res = await app.inject({ method: 'GET', url: '/' });
  t.equal(res.statusCode, 409);
  t.equal(res.headers['content-type'], PROBLEM_CONTENT_TYPE);
  t.equal(res.headers['retry-after'], '1');
  t.equal(res.headers['x-extra'], 'yes');
  t.equal(res.headers['idempotent-replay'], undefined, 'the server marks no key');
  const body = res.json<Record<string, unknown>>();
  t.equal(body['code'], 'request_in_progress');
  t.equal(body['status'], 409);
  t.equal(body['correlation_id'], 'corr-1');
});
