/**
 * "Register the plugin, declare config.idempotent", as a Fastify user would:
 * a bare `Fastify()` app (its own default JSON parser, no server of ours),
 * the sync module's PostgreSQL store, the PostgreSQL unit of work and a tiny
 * effect table, over real sockets. 32 parallel duplicates make one effect, a
 * repeat is the first answer byte for byte, and another body under the key
 * is 422.
 */
import Fastify from 'fastify';
import t from 'tap';
import { systemClock } from '../kernel/clock/index.js';
import { newId } from '../kernel/ids/index.js';
import { InMemoryMetrics } from '../kernel/metrics/index.js';
import { createPrincipalWithToken } from '../modules/identity/index.js';
import { createSyncModule } from '../modules/sync/index.js';
import idempotency, { type IdempotencyEvent } from '../platform/http/idempotency/index.js';
import { createSql } from '../platform/pg/client.js';
import { PgDatabase, PgUnitOfWork } from '../platform/pg/uow.js';
import { testDatabase } from './harness/db.js';

void t.test(
  'a bare Fastify app with the plugin: one effect, byte-for-byte replays, 422',
  async (t) => {
    const tdb = await testDatabase(t);
    await tdb.owner`create table bare_effects (id uuid primary key, owner uuid not null, name text not null)`;
    await tdb.owner.unsafe(`grant select, insert on bare_effects to ${tdb.state.app.name}`);
    const sql = createSql(tdb.appUrl, { max: 10, applicationName: 'bare-plugin' });
    t.teardown(() => sql.end({ timeout: 5 }));
    const db = new PgDatabase(sql);
    const uow = new PgUnitOfWork(db, {
      lockTimeoutMs: 5000,
      statementTimeoutMs: 10_000,
      transactionTimeoutMs: 15_000,
      retryMax: 3,
    });
    const owner = await createPrincipalWithToken(
      { db, uow, clock: systemClock },
      { displayName: 'Bare', kind: 'user' },
    );
    const sync = createSyncModule({
      db,
      clock: systemClock,
      metrics: new InMemoryMetrics(),
      cleanupBatchSize: 1000,
      cleanupPacing: 0,
      cleanupIntervalMs: 3_600_000,
    });

    const app = Fastify();
    const events: IdempotencyEvent[] = [];
    await app.register(idempotency, {
      store: sync.store,
      transaction: uow,
      // The application's own notion of who calls: here a header.
      scope: (req) => (req.headers['x-owner'] === owner.principalId ? owner.principalId : null),
      onEvent: (event) => events.push(event),
    });
    app.post<{ Body: { name: string } }>(
      '/things',
      {
        config: { idempotent: true },
        schema: {
          operationId: 'createThing',
          body: {
            type: 'object',
            properties: { name: { type: 'string' } },
            required: ['name'],
            additionalProperties: false,
          },
        },
      },
      async (req, reply) => {
        const id = newId();
        await uow.run(async () => {
          await db.sql()`insert into bare_effects (id, owner, name) values (${id}, ${owner.principalId}, ${req.body.name})`;
        });
        reply.code(201);
        return { id, name: req.body.name };
      },
    );
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    t.teardown(() => app.close());

    const key = newId();
    const post = (body: string) =>
      fetch(`${base}/things`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-owner': owner.principalId,
          'idempotency-key': key,
        },
        body,
      });
    const answers = await Promise.all(
      Array.from({ length: 32 }, async () => {
        const res = await post('{"name":"one"}');
        return {
          status: res.status,
          replay: res.headers.get('idempotent-replay'),
          body: await res.text(),
        };
      }),
    );
    const [effects] = await tdb.owner<
      { n: string }[]
    >`select count(*)::text as n from bare_effects`;
    t.equal(effects?.n, '1', '32 parallel duplicates, one effect');
    const first = answers.filter((a) => a.replay === null);
    t.equal(first.length, 1, 'one first answer');
    const body = first[0]?.body ?? '';
    t.same(
      answers.filter((a) => a.replay !== null).map((a) => a.status),
      Array<number>(31).fill(201),
      'every other answer is a replay of the 201',
    );
    t.ok(
      answers.every((a) => a.body === body),
      'byte for byte',
    );
    const again = await post(' { "name" : "one" } ');
    t.equal(again.status, 201);
    t.equal(again.headers.get('idempotent-replay'), 'true', 'an equivalent body replays');
    t.equal(await again.text(), body);
    const other = await post('{"name":"two"}');
    t.equal(other.status, 422, 'another body under the same key');
    t.equal(((await other.json()) as { code?: string }).code, 'idempotency_key_reuse');
    const [still] = await tdb.owner<{ n: string }[]>`select count(*)::text as n from bare_effects`;
    t.equal(still?.n, '1', 'and no second effect');
    const outcomes = events.filter((e) => e.type === 'outcome').map((e) => e.outcome);
    t.equal(outcomes.length, 34, 'one outcome event per keyed request');
    t.equal(outcomes.filter((o) => o === 'stored').length, 1);
    t.equal(outcomes.filter((o) => o === 'reused').length, 1);
  },
);
