import t, { type Test } from 'tap';
import type { RouteOptions } from 'fastify';
import { principalActor, type Authenticator } from '../../../kernel/actor/index.js';
import { ManualClock } from '../../../kernel/clock/index.js';
import { newId } from '../../../kernel/ids/index.js';
import { InMemoryMetrics } from '../../../kernel/metrics/index.js';
import { createHttpServer, type HttpServer } from '../../../platform/http/server.js';
import { createLogger } from '../../../platform/log/index.js';
import { testDatabase } from '../../../test/harness/db.js';
import { testUnitOfWork } from '../../../test/harness/uow.js';
import { createIdentityModule, type IdentityModule } from '../index.js';

const START = '2030-01-01T00:00:00.000Z';
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

interface Problem {
  status: number;
  code: string;
  errors?: { pointer: string; code: string }[];
}

async function server(
  t: Test,
  identity: IdentityModule,
  clock: ManualClock,
  options: { authenticator?: Authenticator; onRoute?: (route: RouteOptions) => void } = {},
): Promise<HttpServer> {
  const app = await createHttpServer({
    logger: createLogger({ appName: 'identity-routes-test', level: 'silent' }),
    bodyLimit: 64 * 1024,
    readiness: () => Promise.resolve(),
    appName: 'identity-routes-test',
    apiVersion: '0.0.0',
    authenticator: options.authenticator ?? identity.authenticator,
    clock,
    rateLimit: { max: 100_000, windowMs: 60_000 },
    metrics: new InMemoryMetrics(),
  });
  if (options.onRoute) app.addHook('onRoute', options.onRoute);
  await identity.descriptor.routes?.(app);
  await app.ready();
  t.teardown(() => app.close());
  return app;
}

async function setup(t: Test) {
  const tdb = await testDatabase(t);
  // The application role: the routes' statements prove its grants too.
  const { db, uow } = testUnitOfWork(t, tdb, {
    applicationName: 'identity-routes-test',
    backoffBaseMs: 1,
  });
  const clock = new ManualClock(START);
  const identity = createIdentityModule({ db, uow, clock });
  const routes: RouteOptions[] = [];
  const app = await server(t, identity, clock, { onRoute: (r) => routes.push(r) });
  const alice = await identity.createPrincipalWithToken({ displayName: 'Alice' });
  const bob = await identity.createPrincipalWithToken({ displayName: 'Bob', kind: 'service' });
  const as = (token: string) => ({ authorization: `Bearer ${token}` });
  return { tdb, app, clock, identity, routes, alice, bob, as };
}

void t.test('POST /api/v1/tokens answers 201 with the secret, once', async (t) => {
  const { app, tdb, alice, as } = await setup(t);
  const res = await app.inject({
    method: 'POST',
    url: '/api/v1/tokens',
    headers: as(alice.token),
    payload: { name: 'deploy script', expires_in_seconds: 3600 },
  });
  t.equal(res.statusCode, 201);
  t.match(res.headers['content-type'], /^application\/json/);
  const body = res.json<Record<string, unknown>>();
  t.same(Object.keys(body).sort(), ['created_at', 'expires_at', 'id', 'name', 'prefix', 'token']);
  t.match(body['id'], UUID_V7);
  t.match(body['token'], /^tok_[a-z2-7]{8}\.[A-Za-z0-9_-]{43}$/);
  t.equal(body['prefix'], String(body['token']).slice(0, 12));
  t.equal(body['name'], 'deploy script');
  t.equal(body['created_at'], START);
  t.equal(body['expires_at'], '2030-01-01T01:00:00.000Z');

  const me = await app.inject({ url: '/api/v1/me', headers: as(String(body['token'])) });
  t.equal(me.statusCode, 200, 'the new token authenticates');

  const list = await app.inject({ url: '/api/v1/tokens', headers: as(alice.token) });
  t.notMatch(list.body, String(body['token']).slice(13), 'a listing never shows the secret');
  const stored = await tdb.owner<{ j: string }[]>`select to_jsonb(t)::text as j from api_tokens t`;
  t.notMatch(
    stored.map((r) => r.j).join(),
    String(body['token']).slice(13, 30),
    'nor does the table',
  );

  const bare = await app.inject({
    method: 'POST',
    url: '/api/v1/tokens',
    headers: as(alice.token),
    payload: {},
  });
  t.equal(bare.statusCode, 201, 'every member is optional');
  t.same(
    [bare.json<{ name: unknown }>().name, bare.json<{ expires_at: unknown }>().expires_at],
    [null, null],
  );
});

void t.test('POST /api/v1/tokens refuses a schema-invalid body with 400', async (t) => {
  const { app, tdb, alice, as } = await setup(t);
  const cases: [string, unknown, string][] = [
    ['empty name', { name: '' }, '#body/name'],
    ['long name', { name: 'x'.repeat(101) }, '#body/name'],
    ['name not a string', { name: { a: 1 } }, '#body/name'],
    ['expiry too short', { expires_in_seconds: 59 }, '#body/expires_in_seconds'],
    ['expiry too long', { expires_in_seconds: 31536001 }, '#body/expires_in_seconds'],
    ['expiry not an integer', { expires_in_seconds: 90.5 }, '#body/expires_in_seconds'],
    ['expiry not a number', { expires_in_seconds: 'soon' }, '#body/expires_in_seconds'],
    ['control characters in the name', { name: 'a\u0007b' }, '#body/name'],
    ['not an object', [1, 2], '#body'],
  ];
  for (const [label, payload, pointer] of cases) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/v1/tokens',
      headers: { ...as(alice.token), 'content-type': 'application/json' },
      payload: JSON.stringify(payload),
    });
    t.equal(res.statusCode, 400, label);
    t.match(res.headers['content-type'], /^application\/problem\+json/, `${label}: problem`);
    const problem = res.json<Problem>();
    t.equal(problem.code, 'validation_failed', `${label}: code`);
    t.ok(
      problem.errors?.some((e) => e.pointer === pointer),
      `${label}: pointer ${pointer} in ${JSON.stringify(problem.errors)}`,
    );
  }
  const [row] = await tdb.owner<{ n: string }[]>`select count(*) as n from api_tokens`;
  t.equal(row?.n, '2', 'only the two first tokens exist');
});

void t.test('a bad, expired or revoked token is 401; so is no token', async (t) => {
  const { app, clock, alice, as } = await setup(t);
  const none = await app.inject({ method: 'POST', url: '/api/v1/tokens', payload: {} });
  t.equal(none.statusCode, 401);
  t.equal(none.json<Problem>().code, 'unauthenticated');
  const garbage = await app.inject({ url: '/api/v1/me', headers: as('tok_aaaaaaaa.nope') });
  t.equal(garbage.statusCode, 401, 'malformed');

  const short = await app.inject({
    method: 'POST',
    url: '/api/v1/tokens',
    headers: as(alice.token),
    payload: { expires_in_seconds: 60 },
  });
  const shortToken = short.json<{ token: string }>().token;
  t.equal((await app.inject({ url: '/api/v1/me', headers: as(shortToken) })).statusCode, 200);
  clock.advance(60_000);
  t.equal(
    (await app.inject({ url: '/api/v1/me', headers: as(shortToken) })).statusCode,
    401,
    'expired at expires_at, by the kernel clock',
  );
  t.equal((await app.inject({ url: '/api/v1/me', headers: as(alice.token) })).statusCode, 200);
});

void t.test("DELETE /api/v1/tokens/{id} revokes the caller's own token", async (t) => {
  const { app, alice, as } = await setup(t);
  const second = await app.inject({
    method: 'POST',
    url: '/api/v1/tokens',
    headers: as(alice.token),
    payload: { name: 'to revoke' },
  });
  const { id, token } = second.json<{ id: string; token: string }>();
  const res = await app.inject({
    method: 'DELETE',
    url: `/api/v1/tokens/${id}`,
    headers: as(alice.token),
  });
  t.equal(res.statusCode, 204);
  t.equal(res.body, '', 'no body');
  t.equal(
    (await app.inject({ url: '/api/v1/me', headers: as(token) })).statusCode,
    401,
    'a revoked token is 401 at once',
  );
  const again = await app.inject({
    method: 'DELETE',
    url: `/api/v1/tokens/${id.toUpperCase()}`,
    headers: as(alice.token),
  });
  t.equal(again.statusCode, 204, 'revoking again (any case of the id) is still 204');

  const self = await app.inject({
    method: 'DELETE',
    url: `/api/v1/tokens/${alice.tokenId}`,
    headers: as(alice.token),
  });
  t.equal(self.statusCode, 204, 'a token may revoke itself');
  t.equal((await app.inject({ url: '/api/v1/me', headers: as(alice.token) })).statusCode, 401);
});

void t.test("another principal's token is 404 and stays valid", async (t) => {
  const { app, alice, bob, as } = await setup(t);
  const foreign = await app.inject({
    method: 'DELETE',
    url: `/api/v1/tokens/${bob.tokenId}`,
    headers: as(alice.token),
  });
  const missing = await app.inject({
    method: 'DELETE',
    url: `/api/v1/tokens/${newId()}`,
    headers: as(alice.token),
  });
  t.equal(foreign.statusCode, 404);
  t.equal(foreign.json<Problem>().code, 'not_found');
  const strip = (body: string) => {
    const { correlation_id: _c, ...rest } = JSON.parse(body) as Record<string, unknown>;
    return rest;
  };
  t.same(strip(foreign.body), strip(missing.body), 'indistinguishable from a missing token');
  t.equal((await app.inject({ url: '/api/v1/me', headers: as(bob.token) })).statusCode, 200);
});

void t.test('a malformed token id is 400 and an id of another uuid version is 404', async (t) => {
  const { app, alice, as } = await setup(t);
  for (const bad of ['nope', '123', `${newId()}x`, "'; drop table api_tokens; --"]) {
    const res = await app.inject({
      method: 'DELETE',
      url: `/api/v1/tokens/${encodeURIComponent(bad)}`,
      headers: as(alice.token),
    });
    t.equal(res.statusCode, 400, bad);
    t.same(
      res.json<Problem>().errors?.map((e) => e.pointer),
      ['#path/id'],
      `${bad}: pointer`,
    );
  }
  const v4 = await app.inject({
    method: 'DELETE',
    url: '/api/v1/tokens/3b241101-e2bb-4255-8caf-4136c566a962',
    headers: as(alice.token),
  });
  t.equal(v4.statusCode, 404);
  t.equal(v4.json<Problem>().code, 'not_found');
});

void t.test("GET /api/v1/tokens lists and pages the caller's tokens", async (t) => {
  const { app, clock, alice, bob, as } = await setup(t);
  for (const name of ['a', 'b', 'c']) {
    clock.advance(1000);
    await app.inject({
      method: 'POST',
      url: '/api/v1/tokens',
      headers: as(alice.token),
      payload: { name },
    });
  }
  const all = await app.inject({ url: '/api/v1/tokens', headers: as(alice.token) });
  t.equal(all.statusCode, 200);
  const body = all.json<{ items: Record<string, unknown>[]; next_cursor: string | null }>();
  t.same(
    body.items.map((i) => i['name']),
    ['c', 'b', 'a', 'initial'],
    "newest first, only the caller's",
  );
  t.equal(body.next_cursor, null);
  t.same(Object.keys(body.items[0] ?? {}).sort(), [
    'created_at',
    'expires_at',
    'id',
    'name',
    'prefix',
    'revoked_at',
  ]);
  t.notOk(body.items.some((i) => i['id'] === bob.tokenId));

  const first = await app.inject({ url: '/api/v1/tokens?limit=3', headers: as(alice.token) });
  const page1 = first.json<{ items: { id: string }[]; next_cursor: string }>();
  t.equal(page1.items.length, 3);
  const second = await app.inject({
    url: `/api/v1/tokens?limit=3&cursor=${page1.next_cursor}`,
    headers: as(alice.token),
  });
  const page2 = second.json<{ items: { id: string }[]; next_cursor: string | null }>();
  t.same(
    page2.items.map((i) => i.id),
    [alice.tokenId],
  );
  t.equal(page2.next_cursor, null);

  for (const query of [
    'limit=0',
    'limit=101',
    'limit=x',
    'cursor=nope',
    'cursor=3b241101-e2bb-4255-8caf-4136c566a962',
  ]) {
    const res = await app.inject({ url: `/api/v1/tokens?${query}`, headers: as(alice.token) });
    t.equal(res.statusCode, 400, query);
    t.match(res.json<Problem>().errors?.[0]?.pointer, /^#query\//, `${query}: pointer`);
  }
});

void t.test('GET /api/v1/me tells the calling principal', async (t) => {
  const { app, alice, bob, as } = await setup(t);
  const me = await app.inject({ url: '/api/v1/me', headers: as(bob.token) });
  t.equal(me.statusCode, 200);
  t.same(me.json(), { id: bob.principalId, kind: 'service', display_name: 'Bob' });
  const other = await app.inject({ url: '/api/v1/me', headers: as(alice.token) });
  t.same(other.json(), { id: alice.principalId, kind: 'user', display_name: 'Alice' });
});

void t.test('the handlers refuse to run for anyone but a known principal', async (t) => {
  const { identity, clock } = await setup(t);
  const ghost = newId();
  const ghostly = await server(t, identity, clock, {
    authenticator: {
      authenticate: () =>
        Promise.resolve(principalActor({ principalId: ghost, principalKind: 'user' })),
    },
  });
  const me = await ghostly.inject({ url: '/api/v1/me', headers: { authorization: 'Bearer x' } });
  t.equal(me.statusCode, 404, 'a principal gone after authentication is not found');

  // A wiring mistake that lets an anonymous caller through must not act.
  const open = await server(t, identity, clock, {
    onRoute: (route) => {
      route.config = { ...route.config, auth: 'none' };
    },
  });
  for (const [method, url] of [
    ['GET', '/api/v1/me'],
    ['GET', '/api/v1/tokens'],
    ['POST', '/api/v1/tokens'],
    ['DELETE', `/api/v1/tokens/${newId()}`],
  ] as const) {
    const res = await open.inject({ method, url, ...(method === 'POST' ? { payload: {} } : {}) });
    t.equal(res.statusCode, 401, `${method} ${url}`);
    t.equal(res.headers['www-authenticate'], 'Bearer');
  }
});

void t.test('every route declares its operation, auth, idempotency and schemas', async (t) => {
  const { app, routes } = await setup(t);
  // Fastify adds a HEAD route for each GET by itself.
  const ours = routes.filter((r) => r.url.startsWith('/api/v1/') && r.method !== 'HEAD');
  const summary = ours
    .map((r) => {
      const schema = r.schema as { operationId?: string } | undefined;
      return `${String(r.method)} ${r.url} ${schema?.operationId ?? '?'} ${JSON.stringify(r.config)}`;
    })
    .sort();
  t.same(summary, [
    'DELETE /api/v1/tokens/:id revokeToken {"auth":"required","idempotent":true}',
    'GET /api/v1/me getMe {"auth":"required","announceKeyLifetime":true}',
    'GET /api/v1/tokens listTokens {"auth":"required"}',
    'POST /api/v1/tokens createToken {"auth":"required","idempotent":true,"oneTimeSecret":true}',
  ]);
  const doc = app.swagger() as unknown as {
    paths: Record<string, Record<string, Record<string, unknown>>>;
  };
  const operations = Object.values(doc.paths).flatMap((p) => Object.values(p));
  for (const id of ['createToken', 'revokeToken', 'listTokens', 'getMe']) {
    const op = operations.find((o) => o['operationId'] === id);
    t.ok(op, `${id} is in the API document`);
    t.same(op?.['tags'], ['identity'], `${id}: tags`);
    t.type(op?.['summary'], 'string', `${id}: summary`);
    t.ok(Object.keys(op?.['responses'] ?? {}).includes('401'), `${id}: 401 documented`);
  }
  const create = operations.find((o) => o['operationId'] === 'createToken');
  t.match(JSON.stringify(create?.['requestBody']), /deploy script/, 'the body has an example');
});

void t.test('a token never mints one that outlives it', async (t) => {
  const { app, alice, as } = await setup(t);
  const mint = async (token: string, payload: Record<string, unknown>) => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/v1/tokens',
      headers: as(token),
      payload,
    });
    t.equal(res.statusCode, 201);
    return res.json<{ token: string; expires_at: string | null }>();
  };
  const short = await mint(alice.token, { expires_in_seconds: 600 });
  t.equal(short.expires_at, '2030-01-01T00:10:00.000Z');
  const forever = await mint(short.token, {});
  t.equal(forever.expires_at, short.expires_at, "no expiry asked: the minting token's");
  const longer = await mint(short.token, { expires_in_seconds: 3600 });
  t.equal(longer.expires_at, short.expires_at, 'a longer one is cut to it');
  const shorter = await mint(short.token, { expires_in_seconds: 60 });
  t.equal(shorter.expires_at, '2030-01-01T00:01:00.000Z', 'a shorter one is kept');
  const grandchild = await mint(forever.token, {});
  t.equal(grandchild.expires_at, short.expires_at, 'and so on down the line');
  const unbounded = await mint(alice.token, {});
  t.equal(unbounded.expires_at, null, 'a token without expiry mints one without');
});
