/**
 * A keyed route declared before the plugin in a bare Fastify app: the
 * plugin's `onRoute` never saw it, so it has none of the plugin's hooks.
 * Fastify lists no routes declared earlier, so the plugin cannot refuse it
 * at start-up; instead every request of such a route answers 500 naming the
 * misorder (and the first one is logged), and its handler never runs
 * unguarded. The right order keeps working.
 */
import { Writable } from 'node:stream';
import Fastify, { type FastifyInstance, type RouteShorthandOptions } from 'fastify';
import t, { type Test } from 'tap';
import { newId } from '../../../kernel/ids/index.js';
import { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
import { InMemoryUnitOfWork } from '../../../kernel/txn/in-memory.js';
import idempotency from './index.js';

const owner = newId();

interface Bare {
  readonly app: FastifyInstance;
  readonly calls: { n: number };
  readonly logs: Record<string, unknown>[];
  /** Declares a keyed POST at `url` on `on` (the app or a child context). */
  keyed(on: FastifyInstance, url: string): void;
  /** Registers the plugin on the app. */
  plugin(): Promise<void>;
}

function bare(t: Test): Bare {
  const logs: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _e, cb) {
      for (const l of chunk.toString().split('\n'))
        if (l !== '') logs.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const app = Fastify({ logger: { level: 'info', stream } });
  t.teardown(() => app.close());
  const uow = new InMemoryUnitOfWork({ retryMax: 2 });
  const store = new InMemoryIdempotencyStore(uow, 2000);
  const calls = { n: 0 };
  const route: RouteShorthandOptions = {
    config: { idempotent: true },
    schema: { operationId: 'createThing' },
  };
  return {
    app,
    calls,
    logs,
    keyed(on, url) {
      on.post(url, route, async (_req, reply) => {
        calls.n += 1;
        reply.code(201);
        return Promise.resolve({ id: newId() });
      });
    },
    async plugin() {
      await app.register(idempotency, {
        store,
        transaction: uow,
        scope: (req) => (req.headers['x-owner'] === owner ? owner : null),
      });
    },
  };
}

async function post(app: FastifyInstance, url: string, key: string | null) {
  return app.inject({
    method: 'POST',
    url,
    headers: {
      'content-type': 'application/json',
      'x-owner': owner,
      ...(key === null ? {} : { 'idempotency-key': key }),
    },
    payload: '{"name":"a"}',
  });
}

async function refusesUnguarded(t: Test, b: Bare, url: string): Promise<void> {
  await b.app.ready();
  for (const key of [newId(), newId(), null]) {
    const res = await post(b.app, url, key);
    t.equal(res.statusCode, 500, `answered 500 (key ${key ?? 'none'})`);
    const body = res.json<{ code?: string; message?: string }>();
    t.equal(body.code, 'FST_IDEMPOTENCY_ROUTE_NOT_GUARDED');
    t.match(body.message, `POST ${url}`, 'the message names the route');
    t.match(body.message, /before the idempotency plugin/, 'and the misorder');
  }
  t.equal(b.calls.n, 0, 'the handler never ran unguarded');
  const logged = b.logs.filter((l) => l['route'] === `POST ${url}` && l['level'] === 50);
  t.equal(logged.length, 1, 'the misorder is logged once, at error level');
}

void t.test('a keyed route declared before the plugin in the same context', async (t) => {
  const b = bare(t);
  b.keyed(b.app, '/early');
  await b.plugin();
  await refusesUnguarded(t, b, '/early');
});

void t.test('a keyed route declared before the plugin in a child context', async (t) => {
  const b = bare(t);
  await b.app.register(
    async (child) => {
      b.keyed(child, '/early');
      await Promise.resolve();
    },
    { prefix: '/child' },
  );
  await b.plugin();
  await refusesUnguarded(t, b, '/child/early');
});

void t.test('the plugin first, then the routes: guarded as before', async (t) => {
  const b = bare(t);
  await b.plugin();
  b.keyed(b.app, '/things');
  await b.app.register(async (child) => {
    b.keyed(child, '/nested');
    await Promise.resolve();
  });
  await b.app.ready();
  for (const url of ['/things', '/nested']) {
    const key = newId();
    const first = await post(b.app, url, key);
    const again = await post(b.app, url, key);
    t.equal(first.statusCode, 201, url);
    t.same(
      [again.statusCode, again.headers['idempotent-replay'], again.body],
      [201, 'true', first.body],
    );
  }
  t.equal(b.calls.n, 2, 'one run per key');
  const unkeyed = await post(b.app, '/things', null);
  t.equal(unkeyed.statusCode, 201, 'a request without a key runs');
});

void t.test('an unkeyed route declared before the plugin runs untouched', async (t) => {
  const b = bare(t);
  b.app.post('/plain', { config: { idempotent: false } }, async () => Promise.resolve({ ok: 1 }));
  b.app.get('/read', async () => Promise.resolve({ ok: 2 }));
  await b.plugin();
  await b.app.ready();
  t.equal((await post(b.app, '/plain', newId())).statusCode, 200);
  t.equal((await b.app.inject({ method: 'GET', url: '/read' })).statusCode, 200);
});
