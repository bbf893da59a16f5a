/**
 * A keyed handler whose write does not join the key's transaction: it
 * writes through a second pool (another PgDatabase, with or without a unit
 * of work of its own). Its effect would then commit on its own, before and
 * whatever the key's transaction does, so a repeat of the key would make a
 * second one. The write is refused before it is sent, the request fails
 * with a 500 that stores nothing, and the refusal is logged, even when the
 * handler catches it. A handler that writes through the plugin's unit of
 * work is untouched. Bare Fastify, the real store and unit of work.
 */
import { Writable } from 'node:stream';
import Fastify, { type FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { systemClock } from '../kernel/clock/index.js';
import { newId, type Id } from '../kernel/ids/index.js';
import { InMemoryMetrics } from '../kernel/metrics/index.js';
import { createSyncModule } from '../modules/sync/index.js';
import idempotency from '../platform/http/idempotency/index.js';
import { createSql } from '../platform/pg/client.js';
import { PgDatabase, PgUnitOfWork } from '../platform/pg/uow.js';
import { testDatabase } from './harness/db.js';

const SETTINGS = {
  lockTimeoutMs: 2_000,
  statementTimeoutMs: 10_000,
  transactionTimeoutMs: 20_000,
  retryMax: 2,
};

interface Setup {
  readonly app: FastifyInstance;
  readonly logs: Record<string, unknown>[];
  /** Runs of each route's handler. */
  readonly runs: Map<string, number>;
  post(url: string, key: Id): Promise<{ status: number; body: string; replay: unknown }>;
  effects(): Promise<number>;
  keys(): Promise<number>;
  /** Writes through the second pool's unit of work, outside any request. */
  otherWrite(): Promise<void>;
}

async function setup(t: Test): Promise<Setup> {
  const tdb = await testDatabase(t);
  const owner = newId();
  await tdb.owner`
    insert into principals (id, kind, display_name) values (${owner}, 'user', 'Escape')`;
  await tdb.owner`create table escape_effects (id uuid primary key, route text not null)`;
  await tdb.owner.unsafe(`grant select, insert on escape_effects to ${tdb.state.app.name}`);
  const pool = createSql(tdb.appUrl, { max: 4, applicationName: 'escape-key' });
  const other = createSql(tdb.appUrl, { max: 2, applicationName: 'escape-other' });
  t.teardown(async () => {
    await pool.end({ timeout: 1 });
    await other.end({ timeout: 1 });
  });
  const db = new PgDatabase(pool);
  const uow = new PgUnitOfWork(db, SETTINGS);
  // What a handler should not write through: a second pool, alone or with
  // a unit of work of its own.
  const otherDb = new PgDatabase(other);
  const otherUow = new PgUnitOfWork(otherDb, SETTINGS);
  const { store } = createSyncModule({
    db,
    clock: systemClock,
    metrics: new InMemoryMetrics(),
    cleanupBatchSize: 100,
    cleanupPacing: 0,
    cleanupIntervalMs: 3_600_000,
  });

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
  await app.register(idempotency, {
    store,
    transaction: uow,
    scope: (req) => (req.headers['x-owner'] === owner ? owner : null),
  });
  const runs = new Map<string, number>();
  const route = (url: string, write: (route: string) => Promise<unknown>): void => {
    app.post(
      url,
      { config: { idempotent: true }, schema: { operationId: url.slice(1) } },
      async (_req, reply) => {
        runs.set(url, (runs.get(url) ?? 0) + 1);
        await write(url);
        reply.code(201);
        return { done: url };
      },
    );
  };
  const insert = (on: PgDatabase, what: string) =>
    on.sql()`insert into escape_effects (id, route) values (${newId()}, ${what})`;
  route('/joined', (what) => uow.run(() => insert(db, what)));
  route('/other-unit-of-work', (what) => otherUow.run(() => insert(otherDb, what)));
  route('/other-pool', (what) => insert(otherDb, what));
  route('/caught', async (what) => {
    try {
      await otherUow.run(() => insert(otherDb, what));
    } catch {
      // A handler that swallows the refusal still does not get a 201.
    }
  });
  await app.ready();
  return {
    app,
    logs,
    runs,
    async post(url, key) {
      const res = await app.inject({
        method: 'POST',
        url,
        headers: { 'content-type': 'application/json', 'x-owner': owner, 'idempotency-key': key },
        payload: '{}',
      });
      return { status: res.statusCode, body: res.body, replay: res.headers['idempotent-replay'] };
    },
    async otherWrite() {
      await otherUow.run(() => insert(otherDb, 'outside'));
    },
    async effects() {
      const [row] = await tdb.owner<{ n: number }[]>`select count(*)::int as n from escape_effects`;
      return row?.n ?? -1;
    },
    async keys() {
      const [row] = await tdb.owner<
        { n: number }[]
      >`select count(*)::int as n from idempotency_keys where state = 'completed'`;
      return row?.n ?? -1;
    },
  };
}

void t.test('a write outside the key transaction is refused, nothing commits', async (t) => {
  const s = await setup(t);
  for (const url of ['/other-unit-of-work', '/other-pool', '/caught']) {
    const key = newId();
    const first = await s.post(url, key);
    t.equal(first.status, 500, `${url}: 500 (${first.body})`);
    t.equal(await s.effects(), 0, `${url}: the write outside the key's transaction never ran`);
    t.equal(await s.keys(), 0, `${url}: nothing stored for the key`);
    const again = await s.post(url, key);
    t.equal(again.status, 500, `${url}: a repeat runs again (nothing was stored)`);
    t.equal(s.runs.get(url), 2, `${url}: the handler ran twice, once per request`);
    const refused = s.logs.filter(
      (l) =>
        l['level'] === 50 &&
        (l['err'] as { code?: unknown } | undefined)?.code === 'TRANSACTION_ESCAPE',
    );
    t.ok(refused.length >= 2, `${url}: the refusal is logged at error level`);
    s.logs.length = 0;
  }
  t.equal(await s.effects(), 0, 'no effect at all');
});

void t.test('a write that joins the key transaction is kept', async (t) => {
  const s = await setup(t);
  const key = newId();
  const first = await s.post('/joined', key);
  const again = await s.post('/joined', key);
  t.equal(first.status, 201, first.body);
  t.same([again.status, again.replay, again.body], [201, 'true', first.body], 'replayed');
  t.equal(s.runs.get('/joined'), 1, 'one run');
  t.equal(await s.effects(), 1, 'one effect');
  t.equal(await s.keys(), 1, 'the key stored with it');
  // Outside a keyed request the second pool is the application's own
  // business: it writes as before.
  await s.otherWrite();
  t.equal(await s.effects(), 2, 'a write through the second pool outside a keyed request');
});
