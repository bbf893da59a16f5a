/**
 * Fast unit tests of the idempotency plugin over the in-memory store and unit
 * of work. The same behaviours run against PostgreSQL in test/idempotency*.
 */
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { Type } from 'typebox';
import { principalActor, type Authenticator } from '../../../kernel/actor/index.js';
import { ManualClock } from '../../../kernel/clock/index.js';
import { problem } from '../../../kernel/errs/index.js';
import { newId, type Id } from '../../../kernel/ids/index.js';
import { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
import { markOneTimeSecret, oneTimeSecretMarked } from '../../../kernel/idempotency/index.js';
import { InMemoryMetrics } from '../../../kernel/metrics/index.js';
import { InMemoryUnitOfWork } from '../../../kernel/txn/in-memory.js';
import { createLogger } from '../../log/index.js';
import { createHttpServer, type HttpServer } from '../server.js';

const alice: Id = newId();
const bob: Id = newId();
const authenticator: Authenticator = {
  authenticate: (token) => {
    if (token === 'alice')
      return Promise.resolve(principalActor({ principalId: alice, principalKind: 'user' }));
    if (token === 'bob')
      return Promise.resolve(principalActor({ principalId: bob, principalKind: 'user' }));
    return Promise.resolve(null);
  },
};

interface Kit {
  app: HttpServer;
  store: InMemoryIdempotencyStore;
  uow: InMemoryUnitOfWork;
  clock: ManualClock;
  metrics: InMemoryMetrics;
  effects: string[];
  calls: { n: number };
  logs: Record<string, unknown>[];
  /**
   * The effect a handler writes through a use case: inside `uow.run`, which
   * joins the keyed attempt's transaction or opens its own (undone on rollback).
   */
  effect(what: string): Promise<void>;
}

const Account = Type.Object({ id: Type.String(), name: Type.String(), version: Type.Integer() });
const CreateBody = Type.Object(
  { name: Type.String({ minLength: 1 }) },
  { additionalProperties: false },
);

async function kit(
  t: Test,
  options: {
    lockTimeoutMs?: number;
    commitHook?: (ctx: { attempt: number }) => Error | undefined;
    faultHook?: (ctx: { attempt: number }) => Error | undefined;
    routes?: (k: Kit) => void;
  } = {},
): Promise<Kit> {
  const logs: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _e, cb) {
      for (const l of chunk.toString().split('\n'))
        if (l !== '') logs.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const uow = new InMemoryUnitOfWork({
    retryMax: 2,
    ...(options.commitHook ? { commitHook: options.commitHook } : {}),
    ...(options.faultHook ? { faultHook: options.faultHook } : {}),
  });
  const store = new InMemoryIdempotencyStore(uow, options.lockTimeoutMs ?? 2000);
  const clock = new ManualClock('2026-03-01T12:00:00Z');
  const metrics = new InMemoryMetrics();
  const effects: string[] = [];
  const app = await createHttpServer({
    logger: createLogger({ appName: 'svc', level: 'info', stream }),
    bodyLimit: 4096,
    readiness: () => Promise.resolve(),
    appName: 'svc',
    apiVersion: '1',
    authenticator,
    clock,
    rateLimit: { max: 10_000, windowMs: 60_000 },
    metrics,
    idempotency: { store, uow, ttlMs: 24 * 3600 * 1000, waitMs: options.lockTimeoutMs ?? 2000 },
  });
  const k: Kit = {
    app,
    store,
    uow,
    clock,
    metrics,
    effects,
    calls: { n: 0 },
    logs,
    effect: (what) =>
      uow.run(() => {
        const tx = uow.current('effect');
        effects.push(what);
        tx.onRollback(() => effects.splice(effects.lastIndexOf(what), 1));
        return Promise.resolve();
      }),
  };
  // A keyed create route: 201 with an ETag from version and a Location template.
  app.post(
    '/api/v1/accounts',
    {
      config: { idempotent: true, location: '/api/v1/accounts/{id}' },
      schema: {
        operationId: 'createAccount',
        body: CreateBody,
        response: { 201: { ...Account, headers: { ETag: Type.String() } } },
      },
    },
    async (req, reply) => {
      k.calls.n++;
      const name = req.body.name;
      if (name === 'missing') throw problem('not_found', 'No such thing.');
      if (name === 'taken') {
        await k.effect(`half-written ${name}`);
        throw problem('conflict', 'Name taken.', { reason: 'duplicate' });
      }
      if (name === 'step-up') throw problem('step_up_required', 'Confirm it is you.');
      if (name === 'throttle') throw problem('rate_limited', 'Slow down.');
      if (name === 'precondition') throw problem('precondition_required', 'Send If-Match.');
      if (name === 'crash') {
        await k.effect('crash effect');
        throw new Error('handler exploded');
      }
      if (name === 'block') await blocker.wait();
      await k.effect(`account ${name}`);
      reply.code(201);
      return { id: newId(), name, version: 1, extra: 'dropped by the serializer' };
    },
  );
  // A required-key route whose 2xx answers carry a one-time secret.
  app.post(
    '/api/v1/secrets',
    {
      config: { idempotent: 'required', oneTimeSecret: true },
      schema: { operationId: 'createSecret', body: Type.Object({ label: Type.String() }) },
    },
    async (_req, reply) => {
      k.calls.n++;
      await k.effect('secret');
      reply.code(201);
      return { id: newId(), secret: 's3cr3t-value' };
    },
  );
  // Only some answers carry a secret: the handler marks them.
  app.post(
    '/api/v1/maybe-secret',
    {
      config: { idempotent: true },
      schema: { operationId: 'maybeSecret', body: Type.Object({ secret: Type.Boolean() }) },
    },
    (req) => {
      k.calls.n++;
      if (req.body.secret) markOneTimeSecret();
      return Promise.resolve({ secret: req.body.secret ? 'x-secret' : null });
    },
  );
  // Keyed PUT with a path parameter and preconditions.
  app.put(
    '/api/v1/items/:id',
    {
      config: { idempotent: true },
      schema: { operationId: 'putItem', body: Type.Object({ v: Type.Integer() }) },
    },
    async (req) => {
      k.calls.n++;
      await k.effect(`put ${JSON.stringify(req.body)}`);
      return { ok: true, v: req.body.v };
    },
  );
  // An optional-auth keyed route, and an unflagged write route.
  app.post(
    '/api/v1/open',
    { config: { idempotent: true, auth: 'optional' }, schema: { operationId: 'openWrite' } },
    () => {
      k.calls.n++;
      return Promise.resolve({ ok: true });
    },
  );
  app.post(
    '/api/v1/plain',
    { config: { idempotent: false }, schema: { operationId: 'plainWrite' } },
    () => {
      k.calls.n++;
      return Promise.resolve({ ok: true });
    },
  );
  app.delete(
    '/api/v1/items/:id',
    { config: { idempotent: true }, schema: { operationId: 'deleteItem' } },
    async (_req, reply) => {
      k.calls.n++;
      await k.effect('deleted');
      reply.code(204);
      return undefined;
    },
  );
  options.routes?.(k);
  await app.ready();
  t.teardown(() => app.close());
  return k;
}

const blocker = (() => {
  let release: () => void = () => undefined;
  let entered: () => void = () => undefined;
  let gate = Promise.resolve();
  let inside = Promise.resolve();
  return {
    arm() {
      gate = new Promise<void>((r) => (release = r));
      inside = new Promise<void>((r) => (entered = r));
    },
    wait() {
      entered();
      return gate;
    },
    entered: () => inside,
    release: () => {
      release();
    },
  };
})();

const KEY = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
const KEY2 = '0190f2a4-1b2c-7d3e-8f40-123456789abd';

function post(app: HttpServer, url: string, body: unknown, headers: Record<string, string> = {}) {
  return app.inject({
    method: 'POST',
    url,
    headers: { authorization: 'Bearer alice', 'content-type': 'application/json', ...headers },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

void t.test(
  'first answer stored, repeat replayed byte for byte with Idempotent-Replay',
  async (t) => {
    const k = await kit(t);
    const first = await post(k.app, '/api/v1/accounts', { name: 'a' }, { 'idempotency-key': KEY });
    t.equal(first.statusCode, 201);
    t.equal(first.headers['content-type'], 'application/json; charset=utf-8');
    t.equal(
      first.headers['idempotent-replay'],
      'false',
      'the first answer is the stored answer of the key, not a replay',
    );
    const body = first.json<{ id: string; version: number }>();
    t.equal(
      first.body,
      `{"id":"${body.id}","name":"a","version":1}`,
      'canonical bytes, shaped by the serializer',
    );
    t.equal(first.headers.etag, '"1"');
    t.equal(first.headers.location, `/api/v1/accounts/${body.id}`);
    const again = await post(k.app, '/api/v1/accounts', { name: 'a' }, { 'idempotency-key': KEY });
    t.equal(again.statusCode, 201);
    t.equal(again.headers['idempotent-replay'], 'true');
    t.same(again.rawPayload, first.rawPayload, 'raw bytes identical');
    t.equal(again.headers['content-type'], first.headers['content-type']);
    t.equal(again.headers.etag, '"1"');
    t.equal(again.headers.location, first.headers.location);
    t.not(
      again.headers['correlation-id'],
      first.headers['correlation-id'],
      'the current request keeps its own id',
    );
    t.equal(k.calls.n, 1, 'the handler ran once');
    t.same(k.effects, ['account a'], 'one effect');
    t.equal(
      k.metrics.value('idempotency_requests_total', { route: 'createAccount', outcome: 'stored' }),
      1,
    );
    t.equal(
      k.metrics.value('idempotency_requests_total', {
        route: 'createAccount',
        outcome: 'replayed',
      }),
      1,
    );
    t.ok(
      k.logs.some((l) => l['idempotency_outcome'] === 'replayed'),
      'the outcome is on the log line',
    );
  },
);

void t.test('reuse: another body, path or precondition under the same key is 422', async (t) => {
  const k = await kit(t);
  const h = {
    'idempotency-key': KEY,
    authorization: 'Bearer alice',
    'content-type': 'application/json',
  };
  t.equal(
    (
      await k.app.inject({
        method: 'PUT',
        url: '/api/v1/items/1',
        headers: { ...h, 'if-match': '"1"' },
        payload: '{"v":1}',
      })
    ).statusCode,
    200,
  );
  const otherBody = await k.app.inject({
    method: 'PUT',
    url: '/api/v1/items/1',
    headers: { ...h, 'if-match': '"1"' },
    payload: '{"v":2}',
  });
  t.equal(otherBody.statusCode, 422);
  t.equal(otherBody.json<{ code: string }>().code, 'idempotency_key_reuse');
  t.equal(
    otherBody.headers['idempotent-replay'],
    undefined,
    'a reuse is not the answer of the key',
  );
  t.equal(otherBody.headers['content-type'], 'application/problem+json; charset=utf-8');
  const otherPath = await k.app.inject({
    method: 'PUT',
    url: '/api/v1/items/2',
    headers: { ...h, 'if-match': '"1"' },
    payload: '{"v":1}',
  });
  t.equal(otherPath.statusCode, 422);
  const otherPrecondition = await k.app.inject({
    method: 'PUT',
    url: '/api/v1/items/1',
    headers: { ...h, 'if-match': '"2"' },
    payload: '{"v":1}',
  });
  t.equal(otherPrecondition.statusCode, 422);
  const noneMatch = await k.app.inject({
    method: 'PUT',
    url: '/api/v1/items/1',
    headers: { ...h, 'if-none-match': '"1"' },
    payload: '{"v":1}',
  });
  t.equal(noneMatch.statusCode, 422, 'If-None-Match with the same value is another request');
  t.equal(k.calls.n, 1);
  t.equal(
    k.metrics.value('idempotency_requests_total', { route: 'putItem', outcome: 'reused' }),
    4,
  );
});

void t.test(
  'equivalent JSON replays; duplicate members are refused and take no key; quoted and bare keys are one key',
  async (t) => {
    const k = await kit(t);
    const h = { 'idempotency-key': KEY };
    t.equal(
      (await post(k.app, '/api/v1/items/x'.replace('items/x', 'accounts'), '{"name":"\\u0061"}', h))
        .statusCode,
      201,
    );
    const equivalent = await post(k.app, '/api/v1/accounts', ' { "name" : "a" } ', {
      'idempotency-key': `"${KEY.toUpperCase()}"`,
    });
    t.equal(
      equivalent.headers['idempotent-replay'],
      'true',
      'escapes, whitespace and the quoted upper-case key',
    );
    const dup = await post(k.app, '/api/v1/accounts', '{"name":"b","name":"c"}', {
      'idempotency-key': KEY2,
    });
    t.equal(dup.statusCode, 400, 'a duplicate member is refused before the plugin');
    t.same(dup.json<{ errors: unknown }>().errors, [
      { pointer: '#body/name', code: 'duplicate_member' },
    ]);
    t.equal(k.calls.n, 1, 'the handler did not run');
    const value = await post(k.app, '/api/v1/accounts', '{"name":"c"}', {
      'idempotency-key': KEY2,
    });
    t.equal(value.statusCode, 201, 'the key was not taken by the refused body');
    t.equal(value.headers['idempotent-replay'], 'false', 'stored as a first answer');
    t.equal(
      dup.headers['idempotent-replay'],
      undefined,
      'the refusal before the plugin is unmarked',
    );
    t.equal(k.calls.n, 2);
  },
);

void t.test(
  'invalid keys, two keys, a query string and a missing required key are 400 and store nothing',
  async (t) => {
    const k = await kit(t);
    const bad = [
      'not-a-uuid',
      '9b2f1a4e-8c3d-4e5f-9a6b-7c8d9e0f1a2b',
      `"${KEY}`,
      `${KEY} `.repeat(2),
      `'${KEY}'`,
      '',
    ];
    for (const value of bad) {
      const res = await post(
        k.app,
        '/api/v1/accounts',
        { name: 'a' },
        { 'idempotency-key': value },
      );
      t.equal(res.statusCode, 400, `key ${JSON.stringify(value)}`);
      const body = res.json<{ code: string; errors: unknown; hint: string }>();
      t.equal(body.code, 'validation_failed');
      t.same(body.errors, [{ pointer: '#header/Idempotency-Key', code: 'invalid_format' }]);
      t.match(body.hint, /UUIDv7/);
    }
    const two = await k.app.inject({
      method: 'POST',
      url: '/api/v1/accounts',
      headers: {
        authorization: 'Bearer alice',
        'content-type': 'application/json',
        'idempotency-key': [KEY, KEY],
      },
      payload: '{"name":"a"}',
    });
    t.equal(two.statusCode, 400, 'two Idempotency-Key headers');
    t.same(two.json<{ errors: unknown }>().errors, [
      { pointer: '#header/Idempotency-Key', code: 'invalid_format' },
    ]);
    const query = await post(
      k.app,
      '/api/v1/accounts?x=1',
      { name: 'a' },
      { 'idempotency-key': KEY },
    );
    t.equal(query.statusCode, 400);
    t.same(query.json<{ errors: unknown }>().errors, [{ pointer: '#query', code: 'not_allowed' }]);
    const missing = await post(k.app, '/api/v1/secrets', { label: 'x' });
    t.equal(missing.statusCode, 400);
    t.same(missing.json<{ errors: unknown }>().errors, [
      { pointer: '#header/Idempotency-Key', code: 'required' },
    ]);
    t.equal(k.calls.n, 0);
    t.equal(k.store.size(), 0, 'nothing stored');
    t.equal(
      k.metrics.value('idempotency_requests_total', {
        route: 'createAccount',
        outcome: 'invalid_key',
      }),
      bad.length + 2,
    );
  },
);

void t.test('the header is ignored on unflagged routes and for anonymous callers', async (t) => {
  const k = await kit(t);
  const plain1 = await post(k.app, '/api/v1/plain', {}, { 'idempotency-key': KEY });
  const plain2 = await post(k.app, '/api/v1/plain', {}, { 'idempotency-key': KEY });
  t.equal(plain1.statusCode, 200);
  t.notOk(plain2.headers['idempotent-replay']);
  const anon = () =>
    k.app.inject({
      method: 'POST',
      url: '/api/v1/open',
      headers: { 'idempotency-key': 'garbage' },
    });
  t.equal((await anon()).statusCode, 200, 'even an invalid key is ignored for an anonymous caller');
  t.equal((await anon()).statusCode, 200);
  t.equal(k.calls.n, 4, 'every request ran');
  t.equal(k.store.size(), 0);
  const noKey1 = await post(k.app, '/api/v1/accounts', { name: 'nk' });
  const noKey2 = await post(k.app, '/api/v1/accounts', { name: 'nk' });
  t.equal(noKey1.statusCode, 201);
  t.equal(noKey2.statusCode, 201, 'without a key a keyed route runs every time');
  const invalidNoKey = await post(k.app, '/api/v1/accounts', { name: '' });
  t.equal(invalidNoKey.statusCode, 400, 'validation still applies without a key');
});

void t.test(
  'final problems are stored after rolling back to the savepoint; their replay keeps the original correlation_id',
  async (t) => {
    const k = await kit(t);
    const notFound = await post(
      k.app,
      '/api/v1/accounts',
      { name: 'missing' },
      { 'idempotency-key': KEY },
    );
    t.equal(notFound.statusCode, 404);
    t.equal(notFound.headers['idempotent-replay'], 'false', 'a stored problem is marked');
    const notFoundAgain = await post(
      k.app,
      '/api/v1/accounts',
      { name: 'missing' },
      { 'idempotency-key': KEY },
    );
    t.equal(notFoundAgain.statusCode, 404);
    t.equal(notFoundAgain.headers['idempotent-replay'], 'true');
    t.same(notFoundAgain.rawPayload, notFound.rawPayload);
    const conflict = await post(
      k.app,
      '/api/v1/accounts',
      { name: 'taken' },
      { 'idempotency-key': KEY2 },
    );
    t.equal(conflict.statusCode, 409);
    t.same(k.effects, [], 'the effect before the 409 was rolled back');
    const conflictAgain = await post(
      k.app,
      '/api/v1/accounts',
      { name: 'taken' },
      { 'idempotency-key': KEY2 },
    );
    t.equal(conflictAgain.headers['idempotent-replay'], 'true');
    t.equal(
      conflictAgain.json<{ correlation_id: string }>().correlation_id,
      conflict.headers['correlation-id'],
      'the stored problem keeps the first correlation id',
    );
    t.not(conflictAgain.headers['correlation-id'], conflict.headers['correlation-id']);
    t.equal(k.calls.n, 2);
  },
);

void t.test('a schema-invalid body under a key is a stored 400', async (t) => {
  const k = await kit(t);
  const key = newId();
  const first = await post(k.app, '/api/v1/accounts', { name: '' }, { 'idempotency-key': key });
  t.equal(first.statusCode, 400);
  t.equal(first.json<{ errors: { pointer: string }[] }>().errors[0]?.pointer, '#body/name');
  const again = await post(k.app, '/api/v1/accounts', { name: '' }, { 'idempotency-key': key });
  t.equal(again.headers['idempotent-replay'], 'true');
  t.equal(k.calls.n, 0, 'the handler never ran');
  t.ok(k.store.peek(alice, key)?.completed);
});

void t.test(
  '401 step-up, 428, 429 and 5xx are not stored: a repeat with the same key runs',
  async (t) => {
    const k = await kit(t);
    for (const [name, status] of [
      ['step-up', 401],
      ['precondition', 428],
      ['throttle', 429],
      ['crash', 500],
    ] as const) {
      const key = newId();
      const res = await post(k.app, '/api/v1/accounts', { name }, { 'idempotency-key': key });
      t.equal(res.statusCode, status, name);
      t.equal(k.store.size(), 0, `${name}: nothing stored`);
      t.equal(
        res.headers['idempotent-replay'],
        undefined,
        `${name}: an answer not stored is unmarked`,
      );
    }
    t.same(k.effects, [], 'the crash effect was rolled back');
    t.notMatch(
      JSON.stringify(k.logs.filter((l) => l['level'] !== 50)),
      /handler exploded/,
      'only the error line names it',
    );
    t.equal(
      k.metrics.value('idempotency_requests_total', {
        route: 'createAccount',
        outcome: 'not_stored',
      }),
      4,
    );
    // After a step-up the same key works and stores the 2xx.
    let stepUp = true;
    const k2 = await kit(t, {
      routes: (kk) => {
        kk.app.post(
          '/api/v1/transfer',
          { config: { idempotent: true }, schema: { operationId: 'transfer' } },
          async () => {
            kk.calls.n++;
            if (stepUp) throw problem('step_up_required', 'Confirm.');
            await kk.effect('moved');
            return { ok: true };
          },
        );
      },
    });
    const key = newId();
    t.equal(
      (await post(k2.app, '/api/v1/transfer', {}, { 'idempotency-key': key })).statusCode,
      401,
    );
    stepUp = false;
    t.equal(
      (await post(k2.app, '/api/v1/transfer', {}, { 'idempotency-key': key })).statusCode,
      200,
    );
    t.equal(
      (await post(k2.app, '/api/v1/transfer', {}, { 'idempotency-key': key })).headers[
        'idempotent-replay'
      ],
      'true',
    );
    t.same(k2.effects, ['moved']);
  },
);

void t.test('one-time secrets are never stored; a repeat is 409 one_time_secret', async (t) => {
  const k = await kit(t);
  const first = await post(k.app, '/api/v1/secrets', { label: 'x' }, { 'idempotency-key': KEY });
  t.equal(first.statusCode, 201);
  t.match(first.body, /s3cr3t-value/);
  const row = k.store.peek(alice, KEY as Id);
  t.same(row?.response?.body, { one_time_secret: true });
  t.equal(row?.response?.status, 201);
  const again = await post(k.app, '/api/v1/secrets', { label: 'x' }, { 'idempotency-key': KEY });
  t.equal(again.statusCode, 409);
  t.equal(again.headers['idempotent-replay'], 'true');
  const problemBody = again.json<{ code: string; reason: string; hint: string }>();
  t.equal(problemBody.code, 'conflict');
  t.equal(problemBody.reason, 'one_time_secret');
  t.match(problemBody.hint, /new/);
  t.notMatch(again.body, /s3cr3t/);
  t.equal(k.calls.n, 1);
  // The marker: only marked answers are treated as secrets.
  const marked = await post(
    k.app,
    '/api/v1/maybe-secret',
    { secret: true },
    { 'idempotency-key': KEY2 },
  );
  t.equal(marked.statusCode, 200);
  t.equal(
    (await post(k.app, '/api/v1/maybe-secret', { secret: true }, { 'idempotency-key': KEY2 }))
      .statusCode,
    409,
  );
  const plainKey = newId();
  await post(k.app, '/api/v1/maybe-secret', { secret: false }, { 'idempotency-key': plainKey });
  const plainAgain = await post(
    k.app,
    '/api/v1/maybe-secret',
    { secret: false },
    { 'idempotency-key': plainKey },
  );
  t.equal(plainAgain.statusCode, 200);
  t.equal(plainAgain.headers['idempotent-replay'], 'true');
  t.equal(
    k.metrics.value('idempotency_requests_total', {
      route: 'createSecret',
      outcome: 'secret_repeat',
    }),
    1,
  );
});

void t.test('the same key under two principals is independent', async (t) => {
  const k = await kit(t);
  const a = await post(k.app, '/api/v1/accounts', { name: 'a' }, { 'idempotency-key': KEY });
  const b = await post(
    k.app,
    '/api/v1/accounts',
    { name: 'b' },
    { 'idempotency-key': KEY, authorization: 'Bearer bob' },
  );
  t.equal(a.statusCode, 201);
  t.equal(b.statusCode, 201);
  t.equal(b.headers['idempotent-replay'], 'false', "Bob's own first answer");
  t.not(a.json<{ id: string }>().id, b.json<{ id: string }>().id);
  t.same(k.effects, ['account a', 'account b']);
});

void t.test('an expired key behaves as absent', async (t) => {
  const k = await kit(t);
  await post(k.app, '/api/v1/accounts', { name: 'a' }, { 'idempotency-key': KEY });
  k.clock.advance(24 * 3600 * 1000);
  const later = await post(
    k.app,
    '/api/v1/accounts',
    { name: 'other' },
    { 'idempotency-key': KEY },
  );
  t.equal(later.statusCode, 201, 'a different body is no longer a reuse');
  t.equal(later.headers['idempotent-replay'], 'false', 'a first answer again');
  t.same(k.effects, ['account a', 'account other']);
});

void t.test(
  'a retryable error runs the whole attempt again with a fresh capture; one effect',
  async (t) => {
    const deadlock = Object.assign(new Error('deadlock detected'), { code: '40P01' });
    const k = await kit(t, { faultHook: ({ attempt }) => (attempt === 1 ? deadlock : undefined) });
    const res = await post(k.app, '/api/v1/accounts', { name: 'r' }, { 'idempotency-key': KEY });
    t.equal(res.statusCode, 201);
    t.equal(k.calls.n, 2, 'the handler ran twice');
    t.same(k.effects, ['account r'], 'exactly one effect');
    t.equal(
      (await post(k.app, '/api/v1/accounts', { name: 'r' }, { 'idempotency-key': KEY })).headers[
        'idempotent-replay'
      ],
      'true',
    );
  },
);

void t.test(
  'a retried attempt starts from the request as it came: body, headers, status and the one-time-secret marker of the first are gone',
  async (t) => {
    const deadlock = Object.assign(new Error('deadlock detected'), { code: '40P01' });
    const seen: unknown[] = [];
    const k = await kit(t, {
      faultHook: ({ attempt }) => (attempt === 1 ? deadlock : undefined),
      routes: (kit) => {
        kit.app.post(
          '/api/v1/mutating',
          {
            config: { idempotent: true },
            schema: {
              operationId: 'mutating',
              body: Type.Object({ n: Type.Integer(), tags: Type.Array(Type.String()) }),
            },
          },
          async (req, reply) => {
            kit.calls.n++;
            seen.push({
              body: structuredClone(req.body),
              header: reply.getHeader('x-first-attempt'),
              status: reply.statusCode,
              secret: oneTimeSecretMarked(),
            });
            await kit.effect(`mutating ${String(req.body.n)}`);
            // Everything an attempt can leave behind.
            req.body.n += 100;
            req.body.tags.push('changed');
            reply.header('x-first-attempt', 'left behind');
            reply.code(202);
            if (kit.calls.n === 1) markOneTimeSecret();
            return { n: req.body.n, tags: req.body.tags };
          },
        );
      },
    });
    const res = await post(
      k.app,
      '/api/v1/mutating',
      { n: 1, tags: ['a'] },
      { 'idempotency-key': KEY },
    );
    t.equal(res.statusCode, 202);
    t.same(res.json(), { n: 101, tags: ['a', 'changed'] }, 'the answer of the second attempt');
    t.equal(res.headers['x-first-attempt'], undefined, 'a header set by the handler is not kept');
    t.same(seen, [
      { body: { n: 1, tags: ['a'] }, header: undefined, status: 200, secret: false },
      { body: { n: 1, tags: ['a'] }, header: undefined, status: 200, secret: false },
    ]);
    t.same(k.effects, ['mutating 1'], 'one effect');
    const again = await post(
      k.app,
      '/api/v1/mutating',
      { n: 1, tags: ['a'] },
      { 'idempotency-key': KEY },
    );
    t.equal(again.headers['idempotent-replay'], 'true', 'stored: the marker did not survive');
    t.same(again.json(), { n: 101, tags: ['a', 'changed'] });
  },
);

void t.test('a failing commit answers 500 and stores nothing', async (t) => {
  const k = await kit(t, {
    commitHook: () => Object.assign(new Error('deferred constraint'), { code: '23505' }),
  });
  const res = await post(k.app, '/api/v1/accounts', { name: 'c' }, { 'idempotency-key': KEY });
  t.equal(res.statusCode, 500);
  t.equal(res.json<{ code: string }>().code, 'internal_error');
  t.equal(k.store.size(), 0);
  t.same(k.effects, []);
  t.equal(
    k.metrics.value('idempotency_requests_total', {
      route: 'createAccount',
      outcome: 'commit_failed',
    }),
    1,
  );
});

void t.test(
  'a repeat while the first still runs waits, then gets 409 request_in_progress',
  async (t) => {
    const k = await kit(t, { lockTimeoutMs: 50 });
    blocker.arm();
    const first = post(k.app, '/api/v1/accounts', { name: 'block' }, { 'idempotency-key': KEY });
    await blocker.entered();
    const second = await post(
      k.app,
      '/api/v1/accounts',
      { name: 'block' },
      { 'idempotency-key': KEY },
    );
    t.equal(second.statusCode, 409);
    t.equal(second.json<{ code: string }>().code, 'request_in_progress');
    t.equal(second.headers['retry-after'], '1');
    t.equal(
      second.headers['idempotent-replay'],
      undefined,
      'in progress is not the answer of the key',
    );
    blocker.release();
    const firstRes = await first;
    t.equal(firstRes.statusCode, 201);
    const third = await post(
      k.app,
      '/api/v1/accounts',
      { name: 'block' },
      { 'idempotency-key': KEY },
    );
    t.equal(third.headers['idempotent-replay'], 'true');
    t.same(third.rawPayload, firstRes.rawPayload);
    t.equal(k.calls.n, 1);
    t.equal(
      k.metrics.value('idempotency_requests_total', {
        route: 'createAccount',
        outcome: 'in_progress',
      }),
      1,
    );
    t.ok(
      k.metrics.observations('idempotency_key_wait_seconds', { route: 'createAccount' }).length >=
        2,
    );
  },
);

void t.test(
  'a duplicate waiting while the first ends in a final 404 gets the stored 404 as a replay',
  async (t) => {
    const k = await kit(t, {
      routes: (kk) => {
        kk.app.post(
          '/api/v1/slow-missing',
          { config: { idempotent: true }, schema: { operationId: 'slowMissing' } },
          async () => {
            kk.calls.n++;
            await blocker.wait();
            throw problem('not_found', 'Gone missing.');
          },
        );
      },
    });
    blocker.arm();
    const first = post(k.app, '/api/v1/slow-missing', {}, { 'idempotency-key': KEY });
    await blocker.entered();
    const second = post(k.app, '/api/v1/slow-missing', {}, { 'idempotency-key': KEY });
    await new Promise((r) => setTimeout(r, 20));
    blocker.release();
    const [a, b] = await Promise.all([first, second]);
    t.equal(a.statusCode, 404);
    t.equal(b.statusCode, 404);
    t.equal(b.headers['idempotent-replay'], 'true');
    t.same(b.rawPayload, a.rawPayload);
    t.equal(k.calls.n, 1, 'no second run');
  },
);

void t.test('a keyed DELETE with an empty 204 replays empty', async (t) => {
  const k = await kit(t);
  const del = () =>
    k.app.inject({
      method: 'DELETE',
      url: '/api/v1/items/9',
      headers: { authorization: 'Bearer alice', 'idempotency-key': KEY },
    });
  const first = await del();
  t.equal(first.statusCode, 204);
  t.equal(first.body, '');
  const again = await del();
  t.equal(again.statusCode, 204);
  t.equal(again.body, '');
  t.equal(again.headers['idempotent-replay'], 'true');
  t.same(k.effects, ['deleted']);
});

void t.test('OpenAPI: keyed operations document the header and the replay header', async (t) => {
  const k = await kit(t);
  const doc = k.app.swagger() as unknown as {
    paths: Record<
      string,
      Record<
        string,
        {
          parameters?: { name: string; in: string; required?: boolean }[];
          responses: Record<string, { headers?: Record<string, unknown> }>;
        }
      >
    >;
  };
  const create = doc.paths['/api/v1/accounts']?.['post'];
  const keyParam = create?.parameters?.find((p) => p.name === 'Idempotency-Key');
  t.equal(keyParam?.in, 'header');
  t.equal(keyParam?.required, false);
  t.ok(create?.responses['201']?.headers?.['Idempotent-Replay'], 'replay header documented');
  const secret = doc.paths['/api/v1/secrets']?.['post'];
  t.equal(secret?.parameters?.find((p) => p.name === 'Idempotency-Key')?.required, true);
  const plain = doc.paths['/api/v1/plain']?.['post'];
  t.notOk(
    plain?.parameters?.some((p) => p.name === 'Idempotency-Key'),
    'unflagged routes are untouched',
  );
});

void t.test('registration-time refusals name the route', async (t) => {
  const cases: [string, (app: HttpServer) => void, RegExp][] = [
    [
      'write route without idempotent',
      (app) =>
        app.post('/api/v1/w', { schema: { operationId: 'w' } }, () => Promise.resolve(undefined)),
      /must state config\.idempotent/,
    ],
    [
      'querystring schema',
      (app) =>
        app.post(
          '/api/v1/q',
          {
            config: { idempotent: true },
            schema: { operationId: 'q', querystring: Type.Object({ a: Type.String() }) },
          },
          () => Promise.resolve(undefined),
        ),
      /querystring/,
    ],
    [
      'non-JSON body',
      (app) =>
        app.post(
          '/api/v1/b',
          {
            config: { idempotent: true },
            schema: {
              operationId: 'b',
              body: { content: { 'text/plain': { schema: Type.String() } } },
            },
          },
          () => Promise.resolve(undefined),
        ),
      /JSON/,
    ],
    [
      'non-JSON 2xx',
      (app) =>
        app.post(
          '/api/v1/r',
          {
            config: { idempotent: true },
            schema: {
              operationId: 'r',
              response: { 200: { content: { 'text/csv': { schema: Type.String() } } } },
            },
          },
          () => Promise.resolve(undefined),
        ),
      /2xx/,
    ],
    [
      'ETag without version',
      (app) =>
        app.post(
          '/api/v1/e',
          {
            config: { idempotent: true },
            schema: {
              operationId: 'e',
              response: {
                201: { ...Type.Object({ id: Type.String() }), headers: { ETag: Type.String() } },
              },
            },
          },
          () => Promise.resolve(undefined),
        ),
      /version/,
    ],
    [
      'auth none',
      (app) =>
        app.post(
          '/api/v1/n',
          { config: { idempotent: true, auth: 'none' }, schema: { operationId: 'n' } },
          () => Promise.resolve(undefined),
        ),
      /auth: none/,
    ],
    [
      'no operationId',
      (app) =>
        app.post('/api/v1/o', { config: { idempotent: true } }, () => Promise.resolve(undefined)),
      /operationId/,
    ],
    [
      'location without 201',
      (app) =>
        app.post(
          '/api/v1/l',
          {
            config: { idempotent: true, location: '/x/{id}' },
            schema: { operationId: 'l', response: { 200: Type.Object({}) } },
          },
          () => Promise.resolve(undefined),
        ),
      /201/,
    ],
  ];
  for (const [name, add, message] of cases) {
    const uow = new InMemoryUnitOfWork();
    const fresh = await createHttpServer({
      logger: createLogger({ appName: 'svc', level: 'silent' }),
      bodyLimit: 1024,
      readiness: () => Promise.resolve(),
      appName: 'svc',
      apiVersion: '1',
      authenticator,
      clock: new ManualClock('2026-01-01T00:00:00Z'),
      rateLimit: { max: 100, windowMs: 1000 },
      metrics: new InMemoryMetrics(),
      idempotency: { store: new InMemoryIdempotencyStore(uow), uow, ttlMs: 1000, waitMs: 1000 },
    });
    const err = await (async () => {
      try {
        add(fresh);
        await fresh.ready();
        return undefined;
      } catch (e) {
        return e as Error;
      } finally {
        await fresh.close().catch(() => undefined);
      }
    })();
    t.ok(err, `${name}: refused`);
    t.match(err?.message ?? '', message, name);
    t.match(err?.message ?? '', /POST \/api\/v1\//, `${name}: names the method and URL`);
  }
});

void t.test(
  'a stored answer carries the same headers first and on replay; 2xx ranges get their ETag',
  async (t) => {
    const k = await kit(t, {
      routes: (kk) => {
        kk.app.post(
          '/api/v1/ranged',
          {
            config: { idempotent: true },
            schema: {
              operationId: 'ranged',
              response: { '2xx': { ...Account, headers: { ETag: Type.String() } } },
            },
          },
          (_req, reply) => {
            kk.calls.n++;
            reply.header('x-handler-only', 'first');
            reply.code(201);
            return Promise.resolve({ id: newId(), name: 'r', version: 7 });
          },
        );
      },
    });
    const first = await post(k.app, '/api/v1/ranged', {}, { 'idempotency-key': KEY });
    const again = await post(k.app, '/api/v1/ranged', {}, { 'idempotency-key': KEY });
    t.equal(first.statusCode, 201);
    t.equal(
      first.headers.etag,
      '"7"',
      'a 201 under a 2xx schema with an ETag header gets its ETag',
    );
    t.equal(again.headers.etag, '"7"');
    t.notOk(first.headers['x-handler-only'], 'handler-set headers are not sent on stored answers');
    const names = (h: Record<string, unknown>) =>
      Object.keys(h)
        .filter(
          (n) =>
            ![
              'correlation-id',
              'idempotent-replay',
              'date',
              'ratelimit-remaining',
              'ratelimit-reset',
            ].includes(n),
        )
        .sort();
    t.same(names(again.headers), names(first.headers), 'same header names first and on replay');
  },
);

void t.test(
  'after a first answer that is not stored, local duplicates take turns: one at a time, none waits in the store',
  async (t) => {
    const deferred = () => Promise.withResolvers<undefined>();
    const entered = [deferred(), deferred()];
    const gates = [deferred(), deferred()];
    const k = await kit(t, {
      routes: (kk) => {
        kk.app.post(
          '/api/v1/flaky',
          { config: { idempotent: true }, schema: { operationId: 'flaky' } },
          async () => {
            const call = kk.calls.n++;
            if (call < 2) {
              entered[call]?.resolve(undefined);
              await gates[call]?.promise;
            }
            if (call === 0) throw problem('rate_limited', 'Slow down.');
            return { ok: true };
          },
        );
      },
    });
    const first = post(k.app, '/api/v1/flaky', {}, { 'idempotency-key': KEY });
    await entered[0]?.promise;
    const duplicates = [1, 2, 3].map(() =>
      post(k.app, '/api/v1/flaky', {}, { 'idempotency-key': KEY }),
    );
    for (let i = 0; i < 500 && (k.metrics.value('idempotency_local_waiters', {}) ?? 0) < 3; i++) {
      await new Promise((r) => setTimeout(r, 2));
    }
    t.equal(k.metrics.value('idempotency_local_waiters', {}), 3, 'three duplicates wait in memory');
    gates[0]?.resolve(undefined);
    t.equal((await first).statusCode, 429, 'the first answer is not stored');
    await entered[1]?.promise;
    t.equal(k.store.waiting(), 0, 'no duplicate waits in the store beside the one that runs');
    t.equal(
      k.metrics.value('idempotency_local_waiters', {}),
      2,
      'the others still wait their turn in memory',
    );
    gates[1]?.resolve(undefined);
    const answers = await Promise.all(duplicates);
    t.same(
      answers.map((a) => a.statusCode),
      [200, 200, 200],
    );
    t.equal(answers.filter((a) => a.headers['idempotent-replay'] === 'true').length, 2);
    t.equal(k.calls.n, 2, 'the handler ran once more after the 429, not three times');
  },
);
