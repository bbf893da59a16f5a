/**
 * The whole application on a throwaway database, for cross-module tests:
 * configuration from defaults plus overrides, a manual clock, in-memory
 * metrics, principals with tokens, and a test module whose keyed routes write
 * an effect row inside the ambient transaction.
 */
import { Writable } from 'node:stream';
import type { Test } from 'tap';
import { Type } from 'typebox';
import { buildApp, type App } from '../../apps/server/app.js';
import { ManualClock } from '../../kernel/clock/index.js';
import { requireContext } from '../../kernel/context/index.js';
import { problem } from '../../kernel/errs/index.js';
import { newId, type Id } from '../../kernel/ids/index.js';
import { markOneTimeSecret } from '../../kernel/idempotency/index.js';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import { loadConfig } from '../../platform/config/index.js';
import { createLogger } from '../../platform/log/index.js';
import type { ModuleDescriptor } from '../../platform/module/index.js';
import type { FaultContext, PgDatabase, PgUnitOfWork } from '../../platform/pg/uow.js';
import { testDatabase, type TestDatabase } from './db.js';

/** A principal made for a test, with its bearer token. */
export interface TestPrincipal {
  readonly id: Id;
  readonly token: string;
  readonly headers: Record<string, string>;
}

/** A running test application. */
export interface TestApp {
  readonly app: App;
  readonly tdb: TestDatabase;
  readonly clock: ManualClock;
  readonly metrics: InMemoryMetrics;
  readonly logs: Record<string, unknown>[];
  readonly alice: TestPrincipal;
  readonly bob: TestPrincipal;
  /** Handler runs of the effect routes, by route. */
  readonly calls: Map<string, number>;
  /** Gates a handler can wait on (`{"gate": "name"}` in the body). */
  readonly gates: Gates;
  /** Effect rows committed so far. */
  effects(): Promise<{ principal_id: string; label: string }[]>;
  /** Rows of idempotency_keys, as the owner sees them. */
  keys(): Promise<Record<string, unknown>[]>;
}

/** Named gates: a handler announces it entered and waits for release. */
export class Gates {
  private readonly gates = new Map<
    string,
    { entered: Promise<void>; enter: () => void; open: Promise<void>; release: () => void }
  >();
  private get(name: string) {
    let g = this.gates.get(name);
    if (!g) {
      let enter!: () => void;
      let release!: () => void;
      const entered = new Promise<void>((r) => (enter = r));
      const open = new Promise<void>((r) => (release = r));
      g = { entered, enter, open, release };
      this.gates.set(name, g);
    }
    return g;
  }
  /** Called by a handler: marks the gate entered and waits until released. */
  async pass(name: string): Promise<void> {
    const g = this.get(name);
    g.enter();
    await g.open;
  }
  /** Resolves once a handler has reached the gate. */
  entered(name: string): Promise<void> {
    return this.get(name).entered;
  }
  /** Lets the waiting handler continue. */
  release(name: string): void {
    this.get(name).release();
  }
  /** Opens every gate (teardown: no handler is left waiting). */
  releaseAll(): void {
    for (const g of this.gates.values()) g.release();
  }
}

const EffectBody = Type.Object(
  {
    label: Type.String({ minLength: 1, maxLength: 100 }),
    outcome: Type.Optional(
      Type.Union([
        Type.Literal('ok'),
        Type.Literal('not_found'),
        Type.Literal('conflict'),
        Type.Literal('step_up'),
        Type.Literal('throttled'),
        Type.Literal('precondition'),
        Type.Literal('crash'),
        Type.Literal('secret'),
        Type.Literal('sleep'),
        Type.Literal('sleep_then_query'),
        Type.Literal('raise_08006'),
        Type.Literal('raise_57P01'),
      ]),
    ),
    gate: Type.Optional(Type.String()),
  },
  { additionalProperties: false, examples: [{ label: 'first effect' }] },
);
const EffectAnswer = Type.Object({
  id: Type.String({ format: 'uuid' }),
  label: Type.String(),
  version: Type.Integer(),
  secret: Type.Optional(Type.String()),
});

/**
 * The test module: keyed routes whose handlers insert into `test_effects` in
 * the ambient transaction, then answer as the body's `outcome` asks.
 */
function effectsModule(
  ports: { db: PgDatabase; uow: PgUnitOfWork },
  calls: Map<string, number>,
  gates: Gates,
): ModuleDescriptor {
  const handler =
    (route: string) => async (req: { body: unknown }, reply: { code(n: number): unknown }) => {
      calls.set(route, (calls.get(route) ?? 0) + 1);
      const body = req.body as { label: string; outcome?: string; gate?: string };
      const actor = requireContext().actor;
      const principal = actor.kind === 'principal' ? actor.principalId : null;
      return ports.uow.run(async () => {
        const id = newId();
        await ports.db.sql()`insert into test_effects (id, principal_id, label) values (${id}, ${principal}, ${body.label})`;
        if (body.gate !== undefined) await gates.pass(body.gate);
        // A query in flight when the connection dies; the second variant
        // catches its error and queries again, as some use cases would.
        if (body.outcome === 'sleep') await ports.db.sql()`select pg_sleep(30)`;
        if (body.outcome === 'sleep_then_query') {
          try {
            await ports.db.sql()`select pg_sleep(30)`;
          } catch {
            // fall through to the next statement
          }
          await ports.db.sql()`insert into test_effects (id, principal_id, label) values (${newId()}, ${principal}, ${`${body.label}-after`})`;
        }
        // An ERROR with a connection-class SQLSTATE, raised by a function on
        // a live session: the session stays up, only the transaction aborts.
        if (body.outcome === 'raise_08006' || body.outcome === 'raise_57P01') {
          const code = body.outcome.slice('raise_'.length);
          await ports.db.sql()`select set_config('fault.sqlstate', ${code}, true)`;
          await ports.db.sql()`do $$ begin raise exception 'raised by the test' using errcode = current_setting('fault.sqlstate'); end $$`;
        }
        switch (body.outcome) {
          case 'not_found':
            throw problem('not_found', 'No such thing.');
          case 'conflict':
            throw problem('conflict', 'It clashes.', { reason: 'duplicate' });
          case 'step_up':
            throw problem('step_up_required', 'Confirm it is you.');
          case 'throttled':
            throw problem('rate_limited', 'Slow down.', { retryAfterSeconds: 2 });
          case 'precondition':
            throw problem('precondition_required', 'Send If-Match.');
          case 'crash':
            throw new Error('handler exploded');
          case 'secret':
            markOneTimeSecret();
            reply.code(201);
            return { id, label: body.label, version: 1, secret: `sk_${newId()}` };
          default:
            reply.code(201);
            return { id, label: body.label, version: 1 };
        }
      });
    };
  return {
    name: 'testeffects',
    routes: (app) => {
      app.post(
        '/api/v1/effects',
        {
          config: { idempotent: true, location: '/api/v1/effects/{id}' },
          schema: {
            operationId: 'createEffect',
            body: EffectBody,
            response: { 201: { ...EffectAnswer, headers: { ETag: Type.String() } } },
          },
        },
        handler('createEffect'),
      );
      app.put(
        '/api/v1/effects/:id',
        {
          config: { idempotent: 'required' },
          schema: { operationId: 'putEffect', body: EffectBody, response: { 201: EffectAnswer } },
        },
        handler('putEffect'),
      );
      app.post(
        '/api/v1/open-effects',
        {
          config: { idempotent: true, auth: 'optional' },
          schema: { operationId: 'openEffect', body: EffectBody, response: { 201: EffectAnswer } },
        },
        handler('openEffect'),
      );
      app.post(
        '/api/v1/plain-effects',
        {
          config: { idempotent: false },
          schema: { operationId: 'plainEffect', body: EffectBody, response: { 201: EffectAnswer } },
        },
        handler('plainEffect'),
      );
    },
  };
}

/**
 * Another instance of the application (as another api process would be) on
 * the same database as `k`, sharing its clock, gates and call counts, so
 * duplicates can meet in PostgreSQL rather than in one process's memory.
 *
 * @param t the test (teardown closes it).
 * @param k the first instance.
 * @param options configuration overrides.
 * @returns the second application.
 */
export async function secondInstance(
  t: Test,
  k: TestApp,
  options: TestAppOptions = {},
): Promise<App> {
  const config = loadConfig({
    env: {
      DATABASE__URL: k.tdb.appUrl,
      LOG__LEVEL: 'info',
      HTTP__RATE_LIMIT_MAX: '100000',
      METRICS__KEY_STATS_MIN_INTERVAL: '0ms',
      ...options.env,
    },
  });
  const app = await buildApp({
    config,
    appUrl: k.tdb.appUrl,
    logger: createLogger({ appName: config.app.name, level: 'silent' }),
    clock: k.clock,
    metrics: k.metrics,
    extraModules: (ports) => [effectsModule(ports, k.calls, k.gates)],
  });
  t.teardown(async () => {
    k.gates.releaseAll();
    await app.close();
  });
  return app;
}

/** Options of {@link startTestApp}. */
export interface TestAppOptions {
  /** Configuration through environment-style keys (`DATABASE__LOCK_TIMEOUT`: '100ms'). */
  readonly env?: Record<string, string>;
  readonly faultHook?: (ctx: FaultContext) => string | undefined;
  /**
   * The URL the application's pool connects with, made from the test
   * database's (for example through a forwarder that cuts connections).
   */
  readonly appUrl?: (url: string) => string;
}

/**
 * Builds the application on a fresh database with two principals.
 *
 * @param t the test (teardown closes everything).
 * @param options configuration overrides and fault hook.
 * @returns the running test application.
 */
export async function startTestApp(t: Test, options: TestAppOptions = {}): Promise<TestApp> {
  const tdb = await testDatabase(t);
  await tdb.owner`create table test_effects (id uuid primary key, principal_id uuid, label text not null)`;
  await tdb.owner.unsafe(
    `grant select, insert, update, delete on test_effects to ${tdb.state.app.name}`,
  );
  const appUrl = options.appUrl?.(tdb.appUrl) ?? tdb.appUrl;
  const config = loadConfig({
    env: {
      DATABASE__URL: appUrl,
      LOG__LEVEL: 'info',
      HTTP__RATE_LIMIT_MAX: '100000',
      METRICS__KEY_STATS_MIN_INTERVAL: '0ms',
      ...options.env,
    },
  });
  const logs: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _e, cb) {
      for (const l of chunk.toString().split('\n'))
        if (l !== '') logs.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const clock = new ManualClock('2026-06-01T10:00:00Z');
  const metrics = new InMemoryMetrics();
  const calls = new Map<string, number>();
  const gates = new Gates();
  const app = await buildApp({
    config,
    appUrl,
    logger: createLogger({ appName: config.app.name, level: 'info', stream }),
    clock,
    metrics,
    ...(options.faultHook === undefined ? {} : { faultHook: options.faultHook }),
    extraModules: (ports) => [effectsModule(ports, calls, gates)],
  });
  t.teardown(async () => {
    gates.releaseAll();
    await app.close();
  });
  const principal = async (name: string): Promise<TestPrincipal> => {
    const created = await app.identity.createPrincipalWithToken({ displayName: name });
    return {
      id: created.principalId,
      token: created.token,
      headers: { authorization: `Bearer ${created.token}` },
    };
  };
  return {
    app,
    tdb,
    clock,
    metrics,
    logs,
    alice: await principal('Alice'),
    bob: await principal('Bob'),
    calls,
    gates,
    effects: () =>
      tdb.owner<
        { principal_id: string; label: string }[]
      >`select principal_id, label from test_effects order by label`,
    keys: () =>
      tdb.owner<Record<string, unknown>[]>`select * from idempotency_keys order by created_at`,
  };
}
