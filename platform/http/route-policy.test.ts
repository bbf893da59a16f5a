/**
 * The application's route rules, applied by the server's composition: every
 * write route states `idempotent`, and a keyed route is guarded by the
 * idempotency plugin (declared after it). Through a bare Fastify app with
 * the real plugin over the in-memory store.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import t from 'tap';
import { InMemoryIdempotencyStore } from '../../kernel/idempotency/in-memory.js';
import { InMemoryUnitOfWork } from '../../kernel/txn/in-memory.js';
import { idempotencyPlugin } from './idempotency/index.js';
import { writeRoutePolicy } from './route-policy.js';

async function make(
  early: (app: FastifyInstance) => void,
  late: (app: FastifyInstance) => void,
): Promise<FastifyInstance> {
  const app = Fastify();
  writeRoutePolicy(app, { keyed: true });
  early(app);
  const uow = new InMemoryUnitOfWork();
  await app.register(idempotencyPlugin, {
    store: new InMemoryIdempotencyStore(uow),
    transaction: uow,
    scope: () => null,
  });
  late(app);
  return app;
}

void t.test(
  'a keyed route declared before the plugin, or a write route that states nothing, stops start-up',
  async (t) => {
    const keyedEarly = await make(
      (app) => {
        app.post('/early', { config: { idempotent: true }, schema: { operationId: 'early' } }, () =>
          Promise.resolve({}),
        );
      },
      () => undefined,
    );
    await t.rejects(
      async () => keyedEarly.ready(),
      /POST \/early \(operationId early\) is keyed but was registered before/,
    );
    const silent = Fastify();
    writeRoutePolicy(silent, { keyed: true });
    t.throws(
      () => silent.patch('/silent', () => Promise.resolve({})),
      /PATCH \/silent \(operationId missing\) must state config\.idempotent/,
      'refused as it is declared',
    );
    t.throws(
      () => silent.delete('/gone', { schema: { operationId: 'gone' } }, () => Promise.resolve({})),
      /DELETE \/gone \(operationId gone\) must state config\.idempotent/,
    );
    await silent.close();
    const fine = await make(
      (app) => {
        app.get('/read', () => Promise.resolve({}));
        app.post('/plain', { config: { idempotent: false } }, () => Promise.resolve({}));
      },
      (app) => {
        app.post('/keyed', { config: { idempotent: true }, schema: { operationId: 'k' } }, () =>
          Promise.resolve({}),
        );
      },
    );
    await t.resolves(async () => fine.ready());
    t.ok(
      fine.idempotency.guards('POST', '/keyed'),
      'the plugin guards the route declared after it',
    );
    t.notOk(fine.idempotency.guards('POST', '/plain'));
    await fine.close();
  },
);

void t.test('without the plugin a keyed flag is only a statement', async (t) => {
  const app = Fastify();
  writeRoutePolicy(app, { keyed: false });
  app.post('/k', { config: { idempotent: true }, schema: { operationId: 'k' } }, () =>
    Promise.resolve({}),
  );
  await t.resolves(async () => app.ready());
  await app.close();
});

void t.test('a keyed route may not be public: its keys would have no owner', async (t) => {
  for (const keyed of [false, true]) {
    const app = Fastify();
    writeRoutePolicy(app, { keyed });
    t.throws(
      () =>
        app.post(
          '/open',
          { config: { idempotent: 'required', auth: 'none' }, schema: { operationId: 'open' } },
          () => Promise.resolve({}),
        ),
      /POST \/open \(operationId open\) is keyed, so it may not be auth: none \(keys belong to principals\)/,
      `refused as it is declared, plugin ${keyed ? 'registered' : 'absent'}`,
    );
    t.doesNotThrow(
      () =>
        app.post(
          '/open-plain',
          { config: { idempotent: false, auth: 'none' }, schema: { operationId: 'openPlain' } },
          () => Promise.resolve({}),
        ),
      'a public write that is not keyed is the application choice',
    );
    await app.close();
  }
});
