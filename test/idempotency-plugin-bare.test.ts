/**
 * "Register the plugin, declare config.idempotent", as a Fastify user would:
 * bare `Fastify()` apps (their own default JSON parser, their own way of
 * telling who calls, no server of ours; two of them, as two processes), the
 * sync module's PostgreSQL store, the PostgreSQL unit of work and a tiny
 * effect table, over real sockets. 32 parallel duplicates make one effect, a
 * repeat is the first answer byte for byte, another body under the key is
 * 422, and an invalid body is a stored 400.
 */
import Fastify from 'fastify';
import t from 'tap';
import { systemClock } from '../kernel/clock/index.js';
import { newId } from '../kernel/ids/index.js';
import { InMemoryMetrics } from '../kernel/metrics/index.js';
import { createPrincipalWithToken } from '../modules/identity/index.js';
import { createSyncModule } from '../modules/sync/index.js';
import idempotency, { type IdempotencyEvent } from '../platform/http/idempotency/index.js';
import { testDatabase } from './harness/db.js';
import { testUnitOfWork } from './harness/uow.js';

interface Answer {
  readonly status: number;
  readonly replay: string | null;
  readonly body: string;
}

void t.test(
  'bare Fastify apps with the plugin: one effect, byte-for-byte replays, 422, a stored 400',
  async (t) => {
    const tdb = await testDatabase(t);
    await tdb.owner`create table bare_effects (id uuid primary key, owner uuid not null, name text not null)`;
    await tdb.owner.unsafe(`grant select, insert on bare_effects to ${tdb.state.app.name}`);
    const { db, uow } = testUnitOfWork(t, tdb, {
      applicationName: 'bare-plugin',
      max: 10,
      statementTimeoutMs: 10_000,
      transactionTimeoutMs: 15_000,
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

    // Who calls is the application's business: here a header, read in an
    // app-level preValidation hook (after the body is parsed, before the
    // plugin's route-level hook asks scope).
    const makeApp = async (onEvent: (event: IdempotencyEvent) => void): Promise<string> => {
      const app = Fastify();
      const owners = new WeakMap<object, string>();
      await app.register(idempotency, {
        store: sync.store,
        transaction: uow,
        scope: (req) => owners.get(req) ?? null,
        onEvent,
      });
      app.addHook('preValidation', async (req) => {
        if (req.headers['x-owner'] === owner.principalId) owners.set(req, owner.principalId);
        await Promise.resolve();
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
      return base;
    };
    const events: IdempotencyEvent[] = [];
    const one = await makeApp((event) => events.push(event));
    // A second server on the same database whose metrics observer throws:
    // duplicates across the two meet at the key's primary key, and a broken
    // observer breaks nothing.
    const two = await makeApp(() => {
      throw new Error('observer down');
    });

    const send = async (base: string, key: string, body: string): Promise<Answer> => {
      const res = await fetch(`${base}/things`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-owner': owner.principalId,
          'idempotency-key': key,
        },
        body,
      });
      return {
        status: res.status,
        replay: res.headers.get('idempotent-replay'),
        body: await res.text(),
      };
    };
    const effects = async (): Promise<string | undefined> =>
      (await tdb.owner<{ n: string }[]>`select count(*)::text as n from bare_effects`)[0]?.n;

    const key = newId();
    const answers = await Promise.all(
      Array.from({ length: 32 }, (_, i) => send(i % 2 === 0 ? one : two, key, '{"name":"one"}')),
    );
    t.equal(await effects(), '1', '32 parallel duplicates over two servers, one effect');
    const first = answers.filter((a) => a.replay === 'false');
    t.equal(first.length, 1, 'one first answer');
    const body = first[0]?.body ?? '';
    t.same(
      answers.filter((a) => a.replay === 'true').map((a) => a.status),
      Array<number>(31).fill(201),
      'every other answer is a replay of the 201',
    );
    t.ok(
      answers.every((a) => a.body === body),
      'byte for byte',
    );
    const again = await send(one, key, ' { "name" : "one" } ');
    t.same(
      [again.status, again.replay, again.body],
      [201, 'true', body],
      'an equivalent body replays',
    );
    const other = await send(two, key, '{"name":"two"}');
    t.equal(other.status, 422, 'another body under the same key');
    t.equal((JSON.parse(other.body) as { code?: string }).code, 'idempotency_key_reuse');
    t.equal(await effects(), '1', 'and no second effect');
    const outcomes = events.filter((e) => e.type === 'outcome').map((e) => e.outcome);
    t.equal(outcomes.length, 17, 'one outcome event per keyed request of the observed server');

    // With the default problem mapping, an invalid body is a final 400, stored.
    const badKey = newId();
    const bad = await send(one, badKey, '{}');
    t.equal(bad.status, 400, bad.body);
    const badAgain = await send(two, badKey, '{}');
    t.same([badAgain.status, badAgain.replay, badAgain.body], [400, 'true', bad.body], 'replayed');
  },
);
