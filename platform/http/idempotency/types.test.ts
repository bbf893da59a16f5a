/**
 * The plugin's public types, as a Fastify user writes against them. Two
 * halves: `typeChecks` is never called, only compiled by `make typecheck`
 * (each `@ts-expect-error` line must be an error, or the directive itself
 * is one, so a type that grew looser fails the gate); the tap test below
 * registers the plugin with the same typed options on a bare Fastify app
 * and checks what the types promise at run time.
 */
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import t from 'tap';
import { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
import { InMemoryUnitOfWork } from '../../../kernel/txn/in-memory.js';
import {
  OUTCOMES,
  idempotencyPlugin,
  type IdempotencyDecorator,
  type IdempotencyEvent,
  type IdempotencyOptions,
  type Outcome,
} from './index.js';

/** `true` when each of A and B is assignable to the other, else `false`. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;

/** The options a user writes: a store, a unit of work and a scope. */
function options(events: IdempotencyEvent[]): IdempotencyOptions {
  const transaction = new InMemoryUnitOfWork({ retryMax: 2 });
  return {
    store: new InMemoryIdempotencyStore(transaction, 2000),
    transaction,
    scope: (request: FastifyRequest) => request.headers['x-principal'] as string | undefined,
    ttl: 86_400_000,
    wait: 2_000,
    onEvent: (event) => {
      events.push(event);
    },
  };
}

/** Compiled, never run: what must type-check and what must not. */
export function typeChecks(): unknown[] {
  // Compiled only when true: an outcome is exactly one of OUTCOMES, and the
  // decorator on every instance is the exported type.
  const outcomeIsOneOf: Same<Outcome, (typeof OUTCOMES)[number]> = true;
  const decorated: Same<FastifyInstance['idempotency'], IdempotencyDecorator> = true;

  const app = Fastify();
  const base = options([]);
  const { store, transaction, scope } = base;

  // @ts-expect-error the store is required
  void app.register(idempotencyPlugin, { transaction, scope });
  // @ts-expect-error the unit of work is required
  void app.register(idempotencyPlugin, { store, scope });
  // @ts-expect-error the scope is required: keys are per principal
  void app.register(idempotencyPlugin, { store, transaction });
  // @ts-expect-error a scope names a principal by a string, not a number
  void app.register(idempotencyPlugin, { ...base, scope: () => 42 });
  // @ts-expect-error the key's lifetime is milliseconds, not a text
  void app.register(idempotencyPlugin, { ...base, ttl: '24h' });
  // @ts-expect-error an option the plugin does not have
  void app.register(idempotencyPlugin, { ...base, retries: 3 });

  // @ts-expect-error `idempotent` is true, false or 'required'
  app.post('/x', { config: { idempotent: 'yes' } }, () => ({}));
  // @ts-expect-error `oneTimeSecret` is a boolean
  app.post('/y', { config: { idempotent: true, oneTimeSecret: 'once' } }, () => ({}));

  // @ts-expect-error the decorator's guards asks a method and a URL
  void app.idempotency.guards('/x');

  // The plugin's state of a request is its own (under a Symbol), no public
  // property an application could read, overwrite or clash with.
  const stateOf = (req: FastifyRequest): unknown[] => [
    // @ts-expect-error no idempotencyState on a request
    req.idempotencyState,
    // @ts-expect-error no idempotencyBody on a request
    req.idempotencyBody,
  ];

  const onEvent = (event: IdempotencyEvent): unknown => {
    if (event.type === 'outcome') {
      // @ts-expect-error an outcome is one of OUTCOMES, not any text
      const wrong: 'done' = event.outcome;
      return wrong;
    }
    // @ts-expect-error only an outcome event carries the request
    return event.request;
  };
  return [outcomeIsOneOf, decorated, onEvent, stateOf];
}

void t.test('the public types describe what the plugin does', async (t) => {
  const events: IdempotencyEvent[] = [];
  const seen: string[][] = [];
  const app = Fastify();
  t.teardown(() => app.close());
  await app.register(idempotencyPlugin, options(events));
  // Every form of the route config the types allow.
  app.post(
    '/keyed',
    { config: { idempotent: true }, schema: { operationId: 'createKeyed' } },
    async (req, reply) => {
      seen.push(Object.keys(req).filter((k) => k.startsWith('idempotency')));
      reply.code(201);
      return Promise.resolve({ ok: true });
    },
  );
  app.post(
    '/required',
    {
      config: { idempotent: 'required', oneTimeSecret: false },
      schema: { operationId: 'createRequired' },
    },
    async () => Promise.resolve({ ok: true }),
  );
  app.post('/plain', { config: { idempotent: false } }, async () => Promise.resolve({}));
  await app.ready();

  t.equal(app.idempotency.guards('POST', '/keyed'), true, 'a keyed route is guarded');
  t.equal(app.idempotency.guards('POST', '/required'), true);
  t.equal(app.idempotency.guards('POST', '/plain'), false, 'a route keyed false is not');

  const key = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
  const send = () =>
    app.inject({
      method: 'POST',
      url: '/keyed',
      headers: { 'idempotency-key': key, 'x-principal': 'p1', 'content-type': 'application/json' },
      payload: '{"a":1}',
    });
  const first = await send();
  const again = await send();
  t.equal(first.statusCode, 201);
  t.equal(again.headers['idempotent-replay'], 'true', 'the repeat is the stored answer');
  t.same(seen, [[]], 'a keyed request has no property of the plugin by name');
  const outcomes = events.flatMap((e) => (e.type === 'outcome' ? [e.outcome] : []));
  t.equal(outcomes.length, 2, 'one outcome event per keyed request');
  t.ok(
    outcomes.every((o) => (OUTCOMES as readonly string[]).includes(o)),
    `each is one of OUTCOMES: ${outcomes.join(', ')}`,
  );
});
