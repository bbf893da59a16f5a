/**
 * The idempotency capability end to end through Fastify `inject`, on a real
 * PostgreSQL 18, with principals from the identity module and a test module
 * whose handlers write an effect row inside the ambient transaction.
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { secondInstance, startTestApp, type TestApp, type TestPrincipal } from './harness/app.js';

function send(
  k: TestApp,
  who: TestPrincipal | null,
  body: unknown,
  opts: {
    key?: string | string[];
    url?: string;
    method?: 'POST' | 'PUT';
    headers?: Record<string, string>;
  } = {},
) {
  return k.app.http.inject({
    method: opts.method ?? 'POST',
    url: opts.url ?? '/api/v1/effects',
    headers: {
      'content-type': 'application/json',
      ...(who ? who.headers : {}),
      ...(opts.key === undefined ? {} : { 'idempotency-key': opts.key }),
      ...opts.headers,
    },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

void t.test(
  'replay: stored answer byte for byte, Idempotent-Replay, handler once, ETag and Location',
  async (t) => {
    const k = await startTestApp(t);
    const key = newId();
    const first = await send(k, k.alice, { label: 'one' }, { key });
    t.equal(first.statusCode, 201);
    const id = first.json<{ id: string }>().id;
    t.equal(first.body, `{"id":"${id}","label":"one","version":1}`);
    t.equal(first.headers.etag, '"1"');
    t.equal(first.headers.location, `/api/v1/effects/${id}`);
    const again = await send(k, k.alice, { label: 'one' }, { key });
    t.equal(again.statusCode, 201);
    t.equal(again.headers['idempotent-replay'], 'true');
    t.same(again.rawPayload, first.rawPayload, 'raw bytes identical');
    t.equal(again.headers['content-type'], 'application/json; charset=utf-8');
    t.equal(again.headers.etag, '"1"');
    t.equal(again.headers.location, first.headers.location);
    t.equal(k.calls.get('createEffect'), 1);
    t.equal((await k.effects()).length, 1);
    const [row] = await k.keys();
    t.equal(row?.['state'], 'completed');
    t.equal(row?.['response_status'], 201);
    t.equal(row?.['resource_id'], id);
    t.equal(row?.['action'], 'createEffect');
    t.equal(row?.['principal_id'], k.alice.id);
    t.equal(
      new Date(row?.['expires_at'] as string).getTime() -
        new Date(row?.['created_at'] as string).getTime(),
      24 * 3600 * 1000,
    );
    t.equal(
      new Date(row?.['created_at'] as string).toISOString(),
      k.clock.now().toISOString(),
      'times come from the kernel clock',
    );
  },
);

void t.test('reuse: another body, path or If-Match under the same key is 422', async (t) => {
  const k = await startTestApp(t);
  const key = newId();
  const put = (url: string, label: string, ifMatch: string) =>
    send(k, k.alice, { label }, { key, url, method: 'PUT', headers: { 'if-match': ifMatch } });
  t.equal((await put('/api/v1/effects/1', 'a', '"1"')).statusCode, 201);
  for (const [url, label, ifMatch, what] of [
    ['/api/v1/effects/1', 'b', '"1"', 'body'],
    ['/api/v1/effects/2', 'a', '"1"', 'path'],
    ['/api/v1/effects/1', 'a', '"2"', 'If-Match'],
  ] as const) {
    const res = await put(url, label, ifMatch);
    t.equal(res.statusCode, 422, what);
    t.equal(res.json<{ code: string }>().code, 'idempotency_key_reuse', what);
  }
  t.equal((await k.effects()).length, 1);
});

void t.test(
  'equivalent JSON replays; duplicate members are refused and store nothing; quoted and bare keys are one',
  async (t) => {
    const k = await startTestApp(t);
    const key = newId();
    t.equal((await send(k, k.alice, '{"label":"\\u0065q"}', { key })).statusCode, 201);
    const eq = await send(k, k.alice, '  {  "label" : "eq" }', { key: `"${key.toUpperCase()}"` });
    t.equal(eq.headers['idempotent-replay'], 'true');
    const dupKey = newId();
    const dup = await send(k, k.alice, '{"label":"x","label":"y"}', { key: dupKey });
    t.equal(dup.statusCode, 400);
    t.same(dup.json<{ errors: unknown }>().errors, [
      { pointer: '#body/label', code: 'duplicate_member' },
    ]);
    const rows = await k.tdb.owner<{ n: string }[]>`
      select count(*)::text as n from idempotency_keys where key = ${dupKey}`;
    t.equal(rows[0]?.n, '0', 'nothing stored for the refused body');
    const fresh = await send(k, k.alice, '{"label":"y"}', { key: dupKey });
    t.equal(fresh.statusCode, 201, 'the key is still free');
    t.equal(fresh.headers['idempotent-replay'], 'false', 'a first answer');
  },
);

void t.test(
  'final problems: 404 stored without effect, 409 rolled back and stored with its correlation id, 400 stored',
  async (t) => {
    const k = await startTestApp(t);
    const k404 = newId();
    const nf = await send(k, k.alice, { label: 'nf', outcome: 'not_found' }, { key: k404 });
    t.equal(nf.statusCode, 404);
    const nfAgain = await send(k, k.alice, { label: 'nf', outcome: 'not_found' }, { key: k404 });
    t.equal(nfAgain.headers['idempotent-replay'], 'true');
    t.same(nfAgain.rawPayload, nf.rawPayload);
    const k409 = newId();
    const conflict = await send(k, k.alice, { label: 'c', outcome: 'conflict' }, { key: k409 });
    t.equal(conflict.statusCode, 409);
    const conflictAgain = await send(
      k,
      k.alice,
      { label: 'c', outcome: 'conflict' },
      { key: k409 },
    );
    t.equal(conflictAgain.statusCode, 409);
    t.equal(conflictAgain.headers['idempotent-replay'], 'true');
    t.equal(
      conflictAgain.json<{ correlation_id: string }>().correlation_id,
      conflict.headers['correlation-id'],
    );
    t.not(conflictAgain.headers['correlation-id'], conflict.headers['correlation-id']);
    t.same(await k.effects(), [], 'no effect stayed: the savepoint rolled the inserts back');
    const k400 = newId();
    const invalid = await send(k, k.alice, { label: '' }, { key: k400 });
    t.equal(invalid.statusCode, 400);
    t.equal(
      (await send(k, k.alice, { label: '' }, { key: k400 })).headers['idempotent-replay'],
      'true',
    );
    t.equal(k.calls.get('createEffect'), 2, 'the invalid body never reached the handler');
    const states = (await k.keys()).map((r) => [r['response_status'], r['state']]);
    t.same(states, [
      [404, 'completed'],
      [409, 'completed'],
      [400, 'completed'],
    ]);
  },
);

void t.test(
  '401 step-up, 428, 429 and 5xx are not stored; the repeat after a step-up takes effect once',
  async (t) => {
    const k = await startTestApp(t);
    for (const [outcome, status] of [
      ['step_up', 401],
      ['precondition', 428],
      ['throttled', 429],
      ['crash', 500],
    ] as const) {
      const key = newId();
      const res = await send(k, k.alice, { label: outcome, outcome }, { key });
      t.equal(res.statusCode, status, outcome);
      if (outcome === 'throttled') t.equal(res.headers['retry-after'], '2');
      if (outcome === 'crash') t.notMatch(res.body, /exploded/, 'no internals');
      t.notOk(
        (await k.keys()).some((r) => r['key'] === key),
        `${outcome}: nothing stored`,
      );
      const ok = await send(k, k.alice, { label: outcome }, { key });
      t.equal(ok.statusCode, 201, `${outcome}: the key is still free, so the repeat runs`);
      t.equal(
        (await send(k, k.alice, { label: outcome }, { key })).headers['idempotent-replay'],
        'true',
      );
    }
    t.same(
      (await k.effects()).map((e) => e.label),
      ['crash', 'precondition', 'step_up', 'throttled'],
      'one effect per key: the failed attempts left none',
    );
  },
);

void t.test('the same key under two principals is independent', async (t) => {
  const k = await startTestApp(t);
  const key = newId();
  // The same bytes under the same key: only the principal tells the two
  // apart, so a store keyed on anything less would replay Alice's answer
  // (her resource id) to Bob.
  const body = '{"label":"same"}';
  const a = await send(k, k.alice, body, { key });
  const b = await send(k, k.bob, body, { key });
  t.equal(a.statusCode, 201);
  t.equal(b.statusCode, 201);
  t.equal(b.headers['idempotent-replay'], 'false', "Bob's request is not a replay");
  const aId = a.json<{ id: string }>().id;
  const bId = b.json<{ id: string }>().id;
  t.not(bId, aId, "Bob gets his own resource, not Alice's");
  t.equal(b.body, `{"id":"${bId}","label":"same","version":1}`, "Bob's own answer");
  t.equal(k.calls.get('createEffect'), 2, 'the handler ran for each');
  const effects = await k.tdb.owner<{ id: string; principal_id: string }[]>`
    select id::text, principal_id::text from test_effects order by principal_id`;
  t.same(
    Object.fromEntries(effects.map((e) => [e.principal_id, e.id])),
    { [k.alice.id]: aId, [k.bob.id]: bId },
    'one effect each, under its own principal',
  );
  const rows = await k.keys();
  t.same(
    Object.fromEntries(
      rows.map((r) => [
        r['principal_id'] as string,
        [r['key'], r['state'], r['response_status'], r['resource_id'], r['response_body']],
      ]),
    ),
    {
      [k.alice.id]: [key, 'completed', 201, aId, { id: aId, label: 'same', version: 1 }],
      [k.bob.id]: [key, 'completed', 201, bId, { id: bId, label: 'same', version: 1 }],
    },
    'one stored row each, holding its own answer',
  );
  // And each replay gives back its own principal's answer.
  const bAgain = await send(k, k.bob, body, { key });
  t.equal(bAgain.headers['idempotent-replay'], 'true');
  t.same(bAgain.rawPayload, b.rawPayload, "Bob's replay is Bob's answer");
  const aAgain = await send(k, k.alice, body, { key });
  t.equal(aAgain.headers['idempotent-replay'], 'true');
  t.same(aAgain.rawPayload, a.rawPayload, "Alice's replay is Alice's answer");
  t.equal(k.calls.get('createEffect'), 2, 'the replays ran no handler');
});

void t.test(
  'a repeat of a key this process answered is answered from memory, and not with the cache off',
  async (t) => {
    for (const [ttl, fromMemory] of [
      ['60s', true],
      ['0s', false],
    ] as const) {
      const k = await startTestApp(t, { env: { SYNC__IDEMPOTENCY_REPLAY_CACHE_TTL: ttl } });
      const key = newId();
      const first = await send(k, k.alice, { label: 'cached' }, { key });
      t.equal(first.statusCode, 201);
      const read = await send(k, k.alice, { label: 'cached' }, { key });
      t.equal(read.headers['idempotent-replay'], 'true', `${ttl}: replayed`);
      // Only memory can answer once the row is gone.
      await k.tdb.owner`delete from idempotency_keys`;
      const again = await send(k, k.alice, { label: 'cached' }, { key });
      const bob = await send(k, k.bob, { label: 'cached' }, { key });
      t.equal(bob.headers['idempotent-replay'], 'false', `${ttl}: another principal runs anew`);
      if (fromMemory) {
        t.equal(again.headers['idempotent-replay'], 'true', 'replayed from memory');
        t.same(again.rawPayload, first.rawPayload, 'byte for byte');
        t.equal(again.headers.location, first.headers.location);
        t.equal(k.calls.get('createEffect'), 2, 'the handler ran for alice once, bob once');
      } else {
        t.equal(
          again.headers['idempotent-replay'],
          'false',
          'cache off: the key is absent, a first answer',
        );
        t.equal(k.calls.get('createEffect'), 3);
      }
    }
  },
);

void t.test('an expired key behaves as absent and begin replaces the expired row', async (t) => {
  const k = await startTestApp(t);
  const key = newId();
  await send(k, k.alice, { label: 'before' }, { key });
  k.clock.advance(24 * 3600 * 1000);
  const after = await send(k, k.alice, { label: 'after' }, { key });
  t.equal(after.statusCode, 201);
  t.equal(after.headers['idempotent-replay'], 'false', 'a first answer');
  const rows = await k.keys();
  t.equal(rows.length, 1, 'the expired row was replaced');
  t.equal(new Date(rows[0]?.['created_at'] as string).toISOString(), k.clock.now().toISOString());
  t.same(
    (await k.effects()).map((e) => e.label),
    ['after', 'before'],
  );
});

void t.test(
  'a final 409 under a key whose expired row is replaced is stored, and its effect rolled back',
  async (t) => {
    const k = await startTestApp(t);
    const key = newId();
    t.equal((await send(k, k.alice, { label: 'before' }, { key })).statusCode, 201);
    k.clock.advance(24 * 3600 * 1000);
    const first = await send(k, k.alice, { label: 'clash', outcome: 'conflict' }, { key });
    t.equal(first.statusCode, 409);
    const rows = await k.keys();
    t.equal(rows.length, 1);
    t.equal(rows[0]?.['state'], 'completed', 'the final answer was stored');
    t.equal(rows[0]?.['response_status'], 409);
    t.same(
      (await k.effects()).map((e) => e.label),
      ['before'],
      'the 409 attempt left no effect',
    );
    const again = await send(k, k.alice, { label: 'clash', outcome: 'conflict' }, { key });
    t.equal(again.statusCode, 409);
    t.equal(again.headers['idempotent-replay'], 'true');
    t.equal(again.body, first.body, 'replayed byte for byte');
  },
);

void t.test(
  'invalid key, two keys, query string, missing required key: 400 and nothing stored',
  async (t) => {
    const k = await startTestApp(t);
    const cases: [string, Parameters<typeof send>[3], string][] = [
      ['v4 key', { key: '9b2f1a4e-8c3d-4e5f-9a6b-7c8d9e0f1a2b' }, '#header/Idempotency-Key'],
      ['garbage', { key: 'abc' }, '#header/Idempotency-Key'],
      ['two keys', { key: [newId(), newId()] }, '#header/Idempotency-Key'],
      ['query', { key: newId(), url: '/api/v1/effects?debug=1' }, '#query'],
      [
        'missing on required',
        { method: 'PUT', url: '/api/v1/effects/1' },
        '#header/Idempotency-Key',
      ],
    ];
    for (const [name, opts, pointer] of cases) {
      const res = await send(k, k.alice, { label: name }, opts);
      t.equal(res.statusCode, 400, name);
      t.equal(res.json<{ errors: { pointer: string }[] }>().errors[0]?.pointer, pointer, name);
    }
    t.same(await k.keys(), [], 'nothing stored');
    t.same(await k.effects(), []);
  },
);

void t.test('the header is ignored on unflagged routes and for anonymous callers', async (t) => {
  const k = await startTestApp(t);
  const key = newId();
  t.equal(
    (await send(k, k.alice, { label: 'p1' }, { key, url: '/api/v1/plain-effects' })).statusCode,
    201,
  );
  const p2 = await send(k, k.alice, { label: 'p2' }, { key, url: '/api/v1/plain-effects' });
  t.equal(p2.statusCode, 201);
  t.notOk(p2.headers['idempotent-replay']);
  t.equal(
    (await send(k, null, { label: 'o1' }, { key, url: '/api/v1/open-effects' })).statusCode,
    201,
  );
  t.equal(
    (await send(k, null, { label: 'o2' }, { key: 'not-a-key', url: '/api/v1/open-effects' }))
      .statusCode,
    201,
  );
  t.same(await k.keys(), []);
  t.equal((await k.effects()).length, 4);
});

void t.test(
  'one-time secrets (marker): never stored; a repeat is 409 one_time_secret with Idempotent-Replay',
  async (t) => {
    const k = await startTestApp(t);
    const key = newId();
    const first = await send(k, k.alice, { label: 's', outcome: 'secret' }, { key });
    t.equal(first.statusCode, 201);
    const secret = first.json<{ secret: string }>().secret;
    const again = await send(k, k.alice, { label: 's', outcome: 'secret' }, { key });
    t.equal(again.statusCode, 409);
    t.equal(again.headers['idempotent-replay'], 'true');
    t.equal(again.json<{ reason: string }>().reason, 'one_time_secret');
    t.notMatch(again.body, new RegExp(secret));
    const [row] = await k.keys();
    t.same(row?.['response_body'], { one_time_secret: true });
    t.notMatch(
      JSON.stringify(row),
      new RegExp(secret.slice(3)),
      'no part of the secret in the row',
    );
    t.equal(k.calls.get('createEffect'), 1);
  },
);

void t.test(
  'one-time secrets (route flag): the token route never stores the token; no part of it is in clear',
  async (t) => {
    const k = await startTestApp(t);
    const key = newId();
    const create = () =>
      k.app.http.inject({
        method: 'POST',
        url: '/api/v1/tokens',
        headers: { ...k.alice.headers, 'content-type': 'application/json', 'idempotency-key': key },
        payload: JSON.stringify({ name: 'ci' }),
      });
    const first = await create();
    t.equal(first.statusCode, 201);
    const token = first.json<{ token: string }>().token;
    const again = await create();
    t.equal(again.statusCode, 409);
    t.equal(again.json<{ reason: string }>().reason, 'one_time_secret');
    t.equal(again.headers['idempotent-replay'], 'true');
    const keyRows = await k.tdb
      .owner`select row_to_json(k)::text as j, encode(request_sha256, 'hex') as h from idempotency_keys k`;
    const tokenRows = await k.tdb
      .owner`select row_to_json(a)::text as j, encode(secret_sha256, 'hex') as h from api_tokens a`;
    const haystack = [...keyRows, ...tokenRows]
      .map((r) => `${String(r['j'])} ${String(r['h'])}`)
      .join('\n');
    const secretPart = token.slice(-24);
    for (let i = 0; i + 8 <= secretPart.length; i += 4) {
      t.notOk(
        haystack.includes(secretPart.slice(i, i + 8)),
        `no 8-character piece of the secret (${String(i)}) is stored`,
      );
    }
  },
);

void t.test(
  'a fault-injected deadlock runs the handler again with a fresh capture and one effect',
  async (t) => {
    const k = await startTestApp(t, {
      faultHook: ({ attempt, name }) =>
        name === 'createEffect' && attempt === 1 ? '40P01' : undefined,
    });
    const key = newId();
    const res = await send(k, k.alice, { label: 'retried' }, { key });
    t.equal(res.statusCode, 201);
    t.equal(k.calls.get('createEffect'), 2, 'the handler ran twice');
    t.equal((await k.effects()).length, 1, 'exactly one effect');
    t.equal(
      (await send(k, k.alice, { label: 'retried' }, { key })).headers['idempotent-replay'],
      'true',
    );
  },
);

void t.test('a failing commit (deferred constraint) answers 500 and stores nothing', async (t) => {
  const k = await startTestApp(t);
  await k.tdb.owner`
    alter table test_effects add constraint no_doomed check (label <> 'doomed') not valid`;
  await k.tdb.owner`
    create table doomed_marks (label text primary key deferrable initially deferred)`;
  await k.tdb.owner`
    create function fail_doomed() returns trigger language plpgsql as $$
    begin
      if new.label = 'commit-fails' then
        insert into doomed_marks values ('x');
        insert into doomed_marks values ('x');
      end if;
      return new;
    end $$`;
  await k.tdb
    .owner`create trigger doom after insert on test_effects for each row execute function fail_doomed()`;
  await k.tdb.owner.unsafe(`grant insert on doomed_marks to ${k.tdb.state.app.name}`);
  const key = newId();
  const res = await send(k, k.alice, { label: 'commit-fails' }, { key });
  t.equal(res.statusCode, 500);
  t.equal(res.json<{ code: string }>().code, 'internal_error');
  t.same(await k.keys(), [], 'nothing stored');
  t.same(await k.effects(), [], 'no effect');
  t.equal(
    k.metrics.value('idempotency_requests_total', {
      route: 'createEffect',
      outcome: 'commit_failed',
    }),
    1,
  );
});

void t.test(
  'a deeply nested body on a keyed route is a 400 at parse time, never a 500, and nothing is stored',
  async (t) => {
    const k = await startTestApp(t);
    const key = newId();
    const deep = `{"label":"x","gate":${'['.repeat(3000)}${']'.repeat(3000)}}`;
    const res = await send(k, k.alice, deep, { key });
    t.equal(res.statusCode, 400);
    t.same(res.json<{ errors: unknown }>().errors, [{ pointer: '#body', code: 'too_deep' }]);
    t.same(await k.keys(), []);
    t.equal(
      (await send(k, k.alice, { label: 'fine' }, { key })).statusCode,
      201,
      'the key is still free',
    );
  },
);

void t.test(
  'the rate limit counts keyed requests too: past it a fresh key and a replay are 429, nothing stored, no handler run',
  async (t) => {
    const k = await startTestApp(t, { env: { HTTP__RATE_LIMIT_MAX: '3' } });
    const [a, b, c] = [newId(), newId(), newId()];
    t.equal((await send(k, k.alice, { label: 'a' }, { key: a })).statusCode, 201);
    const replay = await send(k, k.alice, { label: 'a' }, { key: a });
    t.equal(replay.headers['idempotent-replay'], 'true', 'a replay within the limit');
    t.equal((await send(k, k.alice, { label: 'b' }, { key: b })).statusCode, 201);
    const fresh = await send(k, k.alice, { label: 'c' }, { key: c });
    t.equal(fresh.statusCode, 429, 'a fresh key past the limit');
    t.equal(fresh.json<{ code: string }>().code, 'rate_limited');
    t.ok(Number(fresh.headers['retry-after']) >= 1, 'with Retry-After');
    const late = await send(k, k.alice, { label: 'a' }, { key: a });
    t.equal(late.statusCode, 429, 'a replay past the limit: the limit runs before the replay');
    t.equal(late.headers['idempotent-replay'], undefined);
    t.equal(k.calls.get('createEffect'), 2, 'the handler ran for a and b only');
    t.same(
      (await k.keys()).map((r) => r['key']),
      [a, b],
      'no row for the key refused by the limit',
    );
    const other = await send(k, k.bob, { label: 'bob' }, { key: c });
    t.equal(other.statusCode, 201, "another principal's limit is its own");
  },
);

void t.test(
  'a keyed DELETE answered 204 is stored as 204 and replayed as 204 without a body, by either instance',
  async (t) => {
    const k = await startTestApp(t);
    const made = await k.app.http.inject({
      method: 'POST',
      url: '/api/v1/tokens',
      headers: { ...k.alice.headers, 'content-type': 'application/json' },
      payload: { name: 'to revoke' },
    });
    const { id } = made.json<{ id: string }>();
    const key = newId();
    const revoke = (app: typeof k.app) =>
      app.http.inject({
        method: 'DELETE',
        url: `/api/v1/tokens/${id}`,
        headers: { ...k.alice.headers, 'idempotency-key': key },
      });
    const first = await revoke(k.app);
    t.equal(first.statusCode, 204);
    t.equal(first.body, '');
    const [row] = await k.keys();
    t.equal(row?.['response_status'], 204, 'the row holds 204');
    t.equal(row?.['state'], 'completed');
    // Neither instance has read the row into its replay cache yet: both
    // repeats are answered from PostgreSQL.
    const other = await secondInstance(t, k);
    for (const [who, app] of [
      ['the same instance', k.app],
      ['another instance', other],
    ] as const) {
      const again = await revoke(app);
      t.equal(again.statusCode, 204, `${who}: 204`);
      t.equal(again.headers['idempotent-replay'], 'true', `${who}: a replay`);
      t.equal(again.body, '', `${who}: no body`);
      t.equal(again.headers['content-type'], undefined, `${who}: no content type`);
    }
  },
);
