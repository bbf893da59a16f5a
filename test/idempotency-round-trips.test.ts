/**
 * What a keyed attempt costs in round trips to PostgreSQL, and that the
 * handler runs only once the key is known to be this request's: the
 * plugin's attempt (platform/http/idempotency/attempt.ts) over the real
 * store and unit of work, through a forwarder that counts the client's
 * writes.
 */
import t, { type Test } from 'tap';
import { systemClock } from '../kernel/clock/index.js';
import { newId, type Id } from '../kernel/ids/index.js';
import { InMemoryMetrics } from '../kernel/metrics/index.js';
import { createSyncModule } from '../modules/sync/index.js';
import { runAttempt, type AttemptInput } from '../platform/http/idempotency/attempt.js';
import type { Captured } from '../platform/http/idempotency/capture.js';
import { testDatabase } from './harness/db.js';
import { testUnitOfWork } from './harness/uow.js';
import { startForwarder } from './harness/forwarder.js';

async function setup(t: Test) {
  const tdb = await testDatabase(t);
  const principalId = newId();
  await tdb.owner`
    insert into principals (id, kind, display_name) values (${principalId}, 'user', 'Round trips')`;
  await tdb.owner`create table effects (id uuid primary key)`;
  await tdb.owner.unsafe(`grant select, insert on effects to ${tdb.state.app.name}`);
  const url = new URL(tdb.appUrl);
  const forwarder = await startForwarder(Number(url.port));
  t.teardown(() => forwarder.close());
  url.port = String(forwarder.port);
  const { db, uow } = testUnitOfWork(t, tdb, {
    applicationName: 'round-trips',
    url: url.toString(),
    max: 1,
    lockTimeoutMs: 2_000,
    statementTimeoutMs: 10_000,
    transactionTimeoutMs: 20_000,
    retryMax: 0,
  });
  const { store } = createSyncModule({
    db,
    clock: systemClock,
    metrics: new InMemoryMetrics(),
    cleanupBatchSize: 100,
    cleanupPacing: 0,
    cleanupIntervalMs: 3_600_000,
  });
  let runs = 0;
  const input = (key: Id, now = new Date()): AttemptInput => ({
    store,
    transaction: uow,
    request: {
      principalId,
      key,
      action: 'createEffect',
      sha256: new Uint8Array(32).fill(3),
      ttlMs: 60_000,
    },
    now: () => now,
    oneTimeSecret: false,
    prepare: () => undefined,
    invoke: async (): Promise<Captured> => {
      runs += 1;
      const id = newId();
      await db.sql()`insert into effects values (${id})`;
      return { status: 201, body: { id }, code: undefined, headers: {} };
    },
    onKeyWait: () => undefined,
  });
  const effects = async () =>
    Number((await tdb.owner<{ n: string }[]>`select count(*) as n from effects`)[0]?.n);
  return { tdb, forwarder, input, effects, runs: () => runs };
}

void t.test(
  'a fresh key costs three round trips: BEGIN, the key and the savepoint; the handler; the answer with the COMMIT',
  async (t) => {
    const { forwarder, input } = await setup(t);
    // Prepares every statement on the one connection.
    t.equal((await runAttempt(input(newId()), 'createEffect')).kind, 'stored');
    const before = forwarder.clientChunks();
    const decision = await runAttempt(input(newId()), 'createEffect');
    t.equal(decision.kind, 'stored');
    t.equal(forwarder.clientChunks() - before, 3);
  },
);

void t.test(
  'a key a first request took: the stored answer is returned and the handler does not run',
  async (t) => {
    const { input, effects, runs } = await setup(t);
    const key = newId();
    const first = await runAttempt(input(key), 'createEffect');
    t.equal(first.kind, 'stored');
    t.equal(await effects(), 1);
    const again = await runAttempt(input(key), 'createEffect');
    t.equal(again.kind, 'existing', 'the row of the first answer');
    t.equal(await effects(), 1);
    t.equal(runs(), 1, 'the handler ran for the first request only');
  },
);

void t.test(
  'an expired row is replaced and the handler runs once for the new lifetime of the key',
  async (t) => {
    const { input, effects, tdb, runs } = await setup(t);
    const key = newId();
    const then = new Date('2026-01-01T00:00:00Z');
    t.equal((await runAttempt(input(key, then), 'createEffect')).kind, 'stored');
    const later = new Date(then.getTime() + 60_001);
    const renewed = await runAttempt(input(key, later), 'createEffect');
    t.equal(renewed.kind, 'stored', 'the key is taken afresh');
    t.equal(await effects(), 2, 'one effect for each lifetime of the key');
    t.equal(runs(), 2, 'one handler run for each');
    const [row] = await tdb.owner<{ created_at: Date }[]>`select created_at from idempotency_keys`;
    t.equal(row?.created_at.getTime(), later.getTime());
  },
);
