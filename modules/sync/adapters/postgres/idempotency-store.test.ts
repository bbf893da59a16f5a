/**
 * The PostgreSQL idempotency store on its own, against a real database:
 * taking a key and completing it in the request's transaction, the cheap
 * path a fresh key takes, the expired row a new request replaces, and a
 * completion that finds no key in progress failing the whole transaction.
 */
import t, { type Test } from 'tap';
import { newId, type Id } from '../../../../kernel/ids/index.js';
import type { IdempotencyRequest } from '../../../../kernel/idempotency/index.js';
import { testDatabase } from '../../../../test/harness/db.js';
import { testUnitOfWork } from '../../../../test/harness/uow.js';
import { PgIdempotencyStore } from './idempotency-store.js';

const NOW = new Date('2026-06-01T10:00:00Z');
const TTL = 3_600_000;

async function setup(t: Test) {
  const tdb = await testDatabase(t);
  const principalId = newId();
  await tdb.owner`
    insert into principals (id, kind, display_name) values (${principalId}, 'user', 'Store tester')`;
  await tdb.owner`create table effects (id int primary key)`;
  await tdb.owner.unsafe(`grant select, insert on effects to ${tdb.state.app.name}`);
  const { db, uow } = testUnitOfWork(t, tdb, {
    applicationName: 'store-test',
    max: 2,
    lockTimeoutMs: 2_000,
    statementTimeoutMs: 10_000,
    transactionTimeoutMs: 20_000,
    retryMax: 0,
  });
  const store = new PgIdempotencyStore(db);
  const request = (key: Id, now = NOW): IdempotencyRequest => ({
    principalId: principalId,
    key,
    action: 'createThing',
    sha256: new Uint8Array(32).fill(7),
    now,
    ttlMs: TTL,
  });
  const rows = () =>
    tdb.owner<
      { key: string; state: string; response_status: number | null; expires_at: Date }[]
    >`select key, state, response_status, expires_at from idempotency_keys order by created_at`;
  const effects = async () =>
    Number((await tdb.owner<{ n: string }[]>`select count(*) as n from effects`)[0]?.n);
  return { tdb, db, uow, store, request, rows, effects, principalId };
}

void t.test('a fresh key is taken and completed with the effect in one transaction', async (t) => {
  const { tdb, db, uow, store, request, rows, effects } = await setup(t);
  const key = newId();
  await uow.run(async () => {
    t.equal(await store.begin(request(key)), null, 'a fresh key is taken');
    await db.tx('effect')`insert into effects values (1)`;
    await store.completeAtCommit(request(key), { status: 201, body: { id: 1 }, resourceId: null });
  });
  const [row] = await rows();
  t.equal(row?.key, key);
  t.equal(row?.state, 'completed');
  t.equal(row?.response_status, 201);
  t.equal(row?.expires_at.getTime(), NOW.getTime() + TTL);
  t.equal(await effects(), 1);
  const [stored] = await tdb.owner<{ response_body: unknown }[]>`
    select response_body from idempotency_keys where key = ${key}`;
  t.same(stored?.response_body, { id: 1 });
  t.equal(store.recall(request(key).principalId, key, NOW), null, 'no cache: memory knows nothing');
});

void t.test('begin on a completed key returns the stored entry and takes nothing', async (t) => {
  const { uow, store, request } = await setup(t);
  const key = newId();
  await uow.run(async () => {
    await store.begin(request(key));
    await store.completeAtCommit(request(key), {
      status: 200,
      body: { ok: true },
      resourceId: null,
    });
  });
  const entry = await uow.run(() => store.begin(request(key)));
  t.equal(entry?.completed, true);
  t.equal(entry?.status, 200);
  t.same(entry?.body, { ok: true });
});

void t.test('an expired row is replaced by the new request, which takes the key', async (t) => {
  const { uow, store, request, rows } = await setup(t);
  const key = newId();
  await uow.run(async () => {
    await store.begin(request(key));
    await store.completeAtCommit(request(key), {
      status: 200,
      body: { old: true },
      resourceId: null,
    });
  });
  const later = new Date(NOW.getTime() + TTL + 1);
  await uow.run(async () => {
    t.equal(await store.begin(request(key, later)), null, 'the key is taken afresh');
    await store.completeAtCommit(request(key, later), {
      status: 201,
      body: { new: true },
      resourceId: null,
    });
  });
  const all = await rows();
  t.equal(all.length, 1, 'one row for the key');
  t.equal(all[0]?.response_status, 201);
  t.equal(all[0]?.expires_at.getTime(), later.getTime() + TTL);
});

void t.test(
  'completing a key that is not in progress in the transaction fails it: nothing commits',
  async (t) => {
    const { db, uow, store, request, rows, effects } = await setup(t);
    await t.rejects(
      uow.run(async () => {
        await db.tx('effect')`insert into effects values (1)`;
        // No begin: the key is not in progress.
        await store.completeAtCommit(request(newId()), {
          status: 201,
          body: null,
          resourceId: null,
        });
      }),
      /0 idempotency keys completed instead of 1/,
    );
    t.same(await rows(), []);
    t.equal(await effects(), 0, 'the effect was rolled back with it');
  },
);

void t.test(
  'take inserts a fresh key with one statement and refuses any existing row, leaving it alone',
  async (t) => {
    const { uow, store, request, rows } = await setup(t);
    const key = newId();
    t.equal(
      await uow.run(async () => {
        const taken = await store.take(request(key));
        await store.completeAtCommit(request(key), {
          status: 200,
          body: { n: 1 },
          resourceId: null,
        });
        return taken;
      }),
      true,
      'a fresh key is taken',
    );
    t.equal(await uow.run(() => store.take(request(key))), false, 'a completed row: not taken');
    const later = new Date(NOW.getTime() + TTL + 1);
    t.equal(
      await uow.run(() => store.take(request(key, later))),
      false,
      'an expired row is not replaced by take (begin does that)',
    );
    const all = await rows();
    t.equal(all.length, 1);
    t.equal(all[0]?.state, 'completed');
    t.equal(all[0]?.expires_at.getTime(), NOW.getTime() + TTL, 'the row is unchanged');
  },
);

void t.test(
  'with a replay cache, an answer this store committed or a completed row its begin met is recalled for its principal only',
  async (t) => {
    const { tdb, db, uow, request, principalId } = await setup(t);
    let mono = 0;
    const store = new PgIdempotencyStore(db, {
      replayCache: { ttlMs: 60_000, maxEntries: 100, now: () => mono },
    });
    const plain = new PgIdempotencyStore(db);
    const key = newId();
    t.equal(store.recall(principalId, key, NOW), null, 'before the key exists: absent');
    await uow.run(async () => {
      await store.begin(request(key));
      await store.completeAtCommit(request(key), {
        status: 201,
        body: { id: 1 },
        resourceId: null,
      });
    });
    // Taken away behind the store's back: only memory can still answer.
    await tdb.owner`delete from idempotency_keys where key = ${key}`;
    const cached = store.recall(principalId, key, NOW);
    t.equal(cached?.status, 201, 'the committed answer, from memory');
    t.same(cached?.body, { id: 1 });
    t.same(cached?.sha256, Buffer.alloc(32, 7), 'with its fingerprint');
    const stranger = newId();
    t.equal(store.recall(stranger, key, NOW), null, 'never to another principal');
    t.equal(store.recall(principalId, key, new Date(NOW.getTime() + TTL)), null, 'never at expiry');

    const rolledBack = newId();
    await t.rejects(
      uow.run(async () => {
        await store.begin(request(rolledBack));
        await store.completeAtCommit(request(rolledBack), {
          status: 201,
          body: null,
          resourceId: null,
        });
        throw new Error('rolled back');
      }),
      /rolled back/,
    );
    t.equal(store.recall(principalId, rolledBack, NOW), null, 'a rolled back answer: not kept');
    const refused = newId();
    await t.rejects(
      uow.run(async () => {
        // Not in progress: PostgreSQL rolls the COMMIT back.
        await store.completeAtCommit(request(refused), {
          status: 201,
          body: null,
          resourceId: null,
        });
      }),
    );
    t.equal(store.recall(principalId, refused, NOW), null, 'a refused completion: not kept');

    const other = newId();
    await uow.run(async () => {
      await plain.begin(request(other));
      await plain.completeAtCommit(request(other), {
        status: 200,
        body: { id: 2 },
        resourceId: null,
      });
    });
    t.equal(store.recall(principalId, other, NOW), null, 'another writer: unknown here');
    const met = await uow.run(() => store.begin(request(other)));
    t.equal(met?.status, 200, 'begin meets the row');
    await tdb.owner`delete from idempotency_keys where key = ${other}`;
    t.same(store.recall(principalId, other, NOW)?.body, { id: 2 }, 'and memory keeps it');
    mono = 60_000;
    t.equal(store.recall(principalId, other, NOW), null, 'not past the cache TTL');
  },
);

void t.test('with a replay cache, an answer over 4 KiB is never kept in memory', async (t) => {
  const { db, uow, request, principalId } = await setup(t);
  const store = new PgIdempotencyStore(db, { replayCache: { ttlMs: 60_000, maxEntries: 100 } });
  const plain = new PgIdempotencyStore(db);
  for (const [writer, how] of [
    [store, 'committed here'],
    [plain, 'met by begin'],
  ] as const) {
    const small = newId();
    const large = newId();
    for (const [key, size] of [
      [small, 4_000],
      [large, 4_100],
    ] as const) {
      await uow.run(async () => {
        await writer.begin(request(key));
        await writer.completeAtCommit(request(key), {
          status: 201,
          body: { text: 'x'.repeat(size) },
          resourceId: null,
        });
      });
      if (writer === plain) await uow.run(() => store.begin(request(key)));
    }
    t.ok(store.recall(principalId, small, NOW), `${how}, under 4 KiB of JSON: kept`);
    t.equal(store.recall(principalId, large, NOW), null, `${how}, over it: not kept`);
  }
});
