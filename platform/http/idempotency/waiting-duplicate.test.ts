/**
 * A duplicate that waited in this process for the first request's turn:
 * it answers from the row the first one committed, found by its own
 * attempt's insert as a duplicate in another process would find it, and
 * reads the store's memory only once, before validation, as every keyed
 * request does. Over a bare Fastify app, the in-memory store and unit of
 * work, and real concurrent requests through `inject`.
 */
import Fastify from 'fastify';
import t from 'tap';
import type { Id } from '../../../kernel/ids/index.js';
import { newId } from '../../../kernel/ids/index.js';
import { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
import type { IdempotencyEntry } from '../../../kernel/idempotency/index.js';
import { InMemoryUnitOfWork } from '../../../kernel/txn/in-memory.js';
import idempotency from './index.js';

/** The in-memory store, counting what each caller asks of it. */
class CountingStore extends InMemoryIdempotencyStore {
  readonly asked = { recall: 0, take: 0, begin: 0 };

  override recall(principalId: Id, key: Id, now: Date): IdempotencyEntry | null {
    this.asked.recall++;
    return super.recall(principalId, key, now);
  }

  override take(...args: Parameters<InMemoryIdempotencyStore['take']>): Promise<boolean> {
    this.asked.take++;
    return super.take(...args);
  }

  override begin(
    ...args: Parameters<InMemoryIdempotencyStore['begin']>
  ): Promise<IdempotencyEntry | null> {
    this.asked.begin++;
    return super.begin(...args);
  }
}

void t.test(
  'a duplicate that waited answers from the committed row, one memory read',
  async (t) => {
    const owner = newId();
    const uow = new InMemoryUnitOfWork({ retryMax: 2 });
    const store = new CountingStore(uow, 2000);
    const app = Fastify();
    t.teardown(() => app.close());
    await app.register(idempotency, {
      store,
      transaction: uow,
      scope: () => owner,
    });
    let runs = 0;
    const { promise: released, resolve: release } = Promise.withResolvers<undefined>();
    const { promise: started, resolve: start } = Promise.withResolvers<undefined>();
    app.post(
      '/things',
      { config: { idempotent: true }, schema: { operationId: 'createThing' } },
      async (_req, reply) => {
        runs++;
        start(undefined);
        await released;
        reply.code(201);
        return { id: newId() };
      },
    );
    await app.ready();
    const key = newId();
    const send = () =>
      app.inject({
        method: 'POST',
        url: '/things',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        payload: '{"name":"a"}',
      });
    const first = send();
    await started;
    const duplicate = send();
    // The duplicate reaches the turn and waits behind the first request.
    await new Promise((r) => setTimeout(r, 50));
    t.equal(store.asked.recall, 2, 'each request read memory once before validation');
    release(undefined);
    const [a, b] = await Promise.all([first, duplicate]);
    t.equal(runs, 1, 'the handler ran once');
    t.equal(a.statusCode, 201);
    t.equal(b.statusCode, 201);
    t.equal(b.headers['idempotent-replay'], 'true', 'the duplicate is a replay');
    t.equal(b.body, a.body, 'byte for byte');
    t.equal(store.asked.recall, 2, 'the duplicate did not read memory again after its wait');
    t.equal(store.asked.take, 2, "the duplicate's attempt met the row with its insert");
    t.equal(store.asked.begin, 1, 'and read it there');
  },
);
