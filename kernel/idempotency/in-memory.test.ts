/**
 * The in-memory store behaves as the PostgreSQL store does where the plugin
 * can tell: a completion that finds no key in progress in the transaction
 * resolves (PostgreSQL's is sent with the COMMIT) and fails the commit.
 */
import t from 'tap';
import { newId, type Id } from '../ids/index.js';
import { InMemoryUnitOfWork } from '../txn/in-memory.js';
import { InMemoryIdempotencyStore } from './in-memory.js';
import type { IdempotencyRequest } from './index.js';

function setup() {
  const uow = new InMemoryUnitOfWork({ retryMax: 0 });
  const store = new InMemoryIdempotencyStore(uow, 100);
  const req = (key: Id): IdempotencyRequest => ({
    principalId: newId(),
    key,
    action: 'createThing',
    sha256: new Uint8Array(32),
    now: new Date('2026-06-01T10:00:00Z'),
    ttlMs: 3_600_000,
  });
  return { uow, store, req };
}

void t.test(
  'completing a key not taken in the transaction fails its commit, not the call',
  async (t) => {
    const { uow, store, req } = setup();
    let completed = false;
    await t.rejects(
      uow.run(async () => {
        await store.completeAtCommit(req(newId()), { status: 201, body: null, resourceId: null });
        completed = true;
      }),
      /no idempotency key in progress/,
    );
    t.ok(completed, 'the call itself resolved');
    t.equal(store.size(), 0);
  },
);

void t.test('completing a key twice fails the commit and stores nothing', async (t) => {
  const { uow, store, req } = setup();
  const r = req(newId());
  await t.rejects(
    uow.run(async () => {
      t.equal(await store.take(r), true);
      await store.completeAtCommit(r, { status: 201, body: { n: 1 }, resourceId: null });
      await store.completeAtCommit(r, { status: 201, body: { n: 2 }, resourceId: null });
    }),
    /no idempotency key in progress/,
  );
  t.equal(store.size(), 0, 'the key was rolled back with the transaction');
});

void t.test('a key taken and completed once commits', async (t) => {
  const { uow, store, req } = setup();
  const r = req(newId());
  await uow.run(async () => {
    await store.take(r);
    await store.completeAtCommit(r, { status: 201, body: { n: 1 }, resourceId: null });
  });
  t.same(store.peek(r.principalId, r.key)?.response, {
    status: 201,
    body: { n: 1 },
    resourceId: null,
  });
});
