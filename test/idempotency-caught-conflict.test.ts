/**
 * A handler that meets a unique violation, catches it and answers a final
 * 409 of its own, over the PostgreSQL unit of work: the failed statement
 * aborted the handler's savepoint, yet the 409 is the request's answer, it
 * is stored with the key and replayed byte for byte, and the handler's
 * writes are rolled back. An in-memory unit of work has no failed
 * statements, so only PostgreSQL shows this (docs/DECISIONS.md, "A unit of
 * work rolls back with a value, and says when its commit failed").
 */
import Fastify from 'fastify';
import t from 'tap';
import { systemClock } from '../kernel/clock/index.js';
import { newId } from '../kernel/ids/index.js';
import { InMemoryMetrics } from '../kernel/metrics/index.js';
import { createSyncModule } from '../modules/sync/index.js';
import idempotency from '../platform/http/idempotency/index.js';
import { testDatabase } from './harness/db.js';
import { testUnitOfWork } from './harness/uow.js';

/** A name to claim, 1 to 40 characters. */
const NAME_BODY = {
  type: 'object',
  required: ['name'],
  additionalProperties: false,
  properties: { name: { type: 'string', minLength: 1, maxLength: 40 } },
} as const;

interface Answer {
  readonly status: number;
  readonly replay: string | null;
  readonly body: string;
}

void t.test(
  'a caught unique violation answered as a final 409 is stored and replayed',
  async (t) => {
    const tdb = await testDatabase(t);
    await tdb.owner`create table caught_names (name text primary key, note text not null)`;
    await tdb.owner`create table caught_log (id uuid primary key, name text not null)`;
    await tdb.owner.unsafe(
      `grant select, insert on caught_names, caught_log to ${tdb.state.app.name}`,
    );
    const { db, uow } = testUnitOfWork(t, tdb, { applicationName: 'caught-conflict', max: 4 });
    const sync = createSyncModule({
      db,
      clock: systemClock,
      metrics: new InMemoryMetrics(),
      cleanupBatchSize: 1000,
      cleanupPacing: 0,
      cleanupIntervalMs: 3_600_000,
    });
    const owner = newId();
    await tdb.owner`insert into principals (id, display_name, kind) values (${owner}, 'Caught', 'user')`;
    const app = Fastify();
    await app.register(idempotency, {
      store: sync.store,
      transaction: uow,
      scope: () => owner,
    });
    app.post<{ Body: { name: string } }>(
      '/names',
      {
        config: { idempotent: true },
        schema: { operationId: 'claimName', body: NAME_BODY },
      },
      async (req, reply) => {
        // A write before the failing one: rolled back with the savepoint.
        await db.sql()`insert into caught_log (id, name) values (${newId()}, ${req.body.name})`;
        try {
          await db.sql()`insert into caught_names (name, note) values (${req.body.name}, 'claimed')`;
        } catch (err) {
          if ((err as { code?: string }).code !== '23505') throw err;
          reply.code(409);
          return { code: 'name_taken', name: req.body.name };
        }
        reply.code(201);
        return { name: req.body.name };
      },
    );
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    t.teardown(() => app.close());
    const send = async (key: string, name: string): Promise<Answer> => {
      const res = await fetch(`${base}/names`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ name }),
      });
      return {
        status: res.status,
        replay: res.headers.get('idempotent-replay'),
        body: await res.text(),
      };
    };

    const claimed = await send(newId(), 'taken');
    t.equal(claimed.status, 201, claimed.body);

    const key = newId();
    const conflict = await send(key, 'taken');
    t.same(
      [conflict.status, conflict.replay, JSON.parse(conflict.body)],
      [409, 'false', { code: 'name_taken', name: 'taken' }],
      "the handler's own 409 is the answer, not a failure",
    );
    const again = await send(key, 'taken');
    t.same(
      [again.status, again.replay, again.body],
      [409, 'true', conflict.body],
      'the repeat replays it byte for byte',
    );
    const rows = await tdb.owner<{ status: number | null; state: string }[]>`
    select response_status as status, state from idempotency_keys where key = ${key}`;
    t.same(
      rows.map((r) => [r.status, r.state]),
      [[409, 'completed']],
      'the key row holds the 409',
    );
    const logged = await tdb.owner<{ n: string }[]>`select count(*)::text as n from caught_log`;
    t.equal(logged[0]?.n, '1', "the 409's own write was rolled back with its savepoint");
  },
);
