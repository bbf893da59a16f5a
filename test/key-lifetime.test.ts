/**
 * The server tells clients how long it keeps a key: every answer of a keyed
 * request (first, replay, and the answers not stored) and `GET /api/v1/me`
 * carry `Idempotency-Key-Lifetime`, the configured
 * `sync.idempotency_key_ttl` in whole seconds; the API document says so.
 * Through the real application on a real PostgreSQL 18.
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { startTestApp } from './harness/app.js';

const HEADER = 'idempotency-key-lifetime';

void t.test('every keyed answer and GET /api/v1/me carry the key lifetime', async (t) => {
  const k = await startTestApp(t, { env: { SYNC__IDEMPOTENCY_KEY_TTL: '36h' } });
  const lifetime = String(36 * 3600);
  const key = newId();
  const post = (body: unknown, k2 = key) =>
    k.app.http.inject({
      method: 'POST',
      url: '/api/v1/accounts',
      headers: { ...k.alice.headers, 'content-type': 'application/json', 'idempotency-key': k2 },
      payload: JSON.stringify(body),
    });
  const first = await post({ name: 'Checking', opening_balance: 100 });
  t.equal(first.statusCode, 201);
  t.equal(first.headers['idempotent-replay'], 'false');
  t.equal(first.headers[HEADER], lifetime, 'the first answer');
  const replay = await post({ name: 'Checking', opening_balance: 100 });
  t.equal(replay.headers['idempotent-replay'], 'true');
  t.equal(replay.headers[HEADER], lifetime, 'the replay');
  const reuse = await post({ name: 'Savings', opening_balance: 0 });
  t.equal(reuse.statusCode, 422);
  t.equal(reuse.headers[HEADER], lifetime, 'a key reused for another request');
  const invalid = await post({ name: 'x', opening_balance: -1 }, newId());
  t.equal(invalid.statusCode, 400);
  t.equal(invalid.headers[HEADER], lifetime, 'a stored final error');

  const me = await k.app.http.inject({ url: '/api/v1/me', headers: k.alice.headers });
  t.equal(me.statusCode, 200);
  t.equal(me.headers[HEADER], lifetime, 'GET /api/v1/me');

  const unkeyed = await k.app.http.inject({
    method: 'POST',
    url: '/api/v1/accounts',
    headers: { ...k.alice.headers, 'content-type': 'application/json' },
    payload: JSON.stringify({ name: 'Plain', opening_balance: 0 }),
  });
  t.equal(unkeyed.statusCode, 201);
  t.equal(unkeyed.headers[HEADER], undefined, 'not on an answer without a key');
});

void t.test('the API document declares the header where it is sent', async (t) => {
  const k = await startTestApp(t);
  const doc = (await k.app.http.inject({ url: '/docs/json' })).json<{
    paths: Record<
      string,
      Record<
        string,
        {
          operationId?: string;
          parameters?: { name: string; in: string }[];
          responses?: Record<string, { headers?: Record<string, unknown> }>;
        }
      >
    >;
  }>();
  let keyed = 0;
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const isKeyed = (op.parameters ?? []).some(
        (p) => p.in === 'header' && p.name === 'Idempotency-Key',
      );
      if (!isKeyed && op.operationId !== 'getMe') continue;
      if (isKeyed) keyed += 1;
      for (const [status, res] of Object.entries(op.responses ?? {})) {
        if (op.operationId === 'getMe' && status !== '200') continue;
        t.ok(
          res.headers?.['Idempotency-Key-Lifetime'],
          `${method.toUpperCase()} ${path} ${status} declares Idempotency-Key-Lifetime`,
        );
      }
    }
  }
  t.ok(keyed > 3, 'the keyed operations were found');
});
