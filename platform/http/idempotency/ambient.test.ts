/**
 * A keyed request that arrives inside a unit of work the application
 * already opened (here a request injected from inside `uow.run`) is
 * refused with a 500 naming the route, runs nothing and stores nothing: its
 * key row would otherwise join a transaction the plugin does not commit.
 */
import Fastify from 'fastify';
import t from 'tap';
import { newId } from '../../../kernel/ids/index.js';
import { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
import { InMemoryUnitOfWork } from '../../../kernel/txn/in-memory.js';
import idempotency, { defaultToProblem } from './index.js';

void t.test('a keyed request inside an open unit of work is refused, nothing stored', async (t) => {
  const uow = new InMemoryUnitOfWork({ retryMax: 1 });
  const store = new InMemoryIdempotencyStore(uow, 1000);
  const errors: unknown[] = [];
  const app = Fastify();
  await app.register(idempotency, {
    store,
    transaction: uow,
    scope: () => 'owner-1',
    toProblem: (err) => {
      errors.push(err);
      return defaultToProblem(err);
    },
  });
  let runs = 0;
  app.post(
    '/things',
    { config: { idempotent: true }, schema: { operationId: 'createThing' } },
    async (_req, reply) => {
      runs++;
      await Promise.resolve();
      reply.code(201);
      return { n: runs };
    },
  );
  await app.ready();
  t.teardown(() => app.close());
  const key = newId();
  const send = () =>
    app.inject({
      method: 'POST',
      url: '/things',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      payload: '{}',
    });

  const inside = await uow.run(() => send());
  t.equal(inside.statusCode, 500, inside.body);
  t.equal(runs, 0, 'the handler did not run');
  t.match(
    errors,
    [{ code: 'FST_IDEMPOTENCY_AMBIENT_TRANSACTION', message: /POST \/things|createThing/ }],
    'the error names the route',
  );
  const outside = await send();
  t.same(
    [outside.statusCode, outside.headers['idempotent-replay'], outside.json()],
    [201, 'false', { n: 1 }],
    'the key was not stored: the same key runs fresh outside',
  );
});
