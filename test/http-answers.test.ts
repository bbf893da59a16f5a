/**
 * What the HTTP edge adds to every answer of the whole application, checked
 * through the real routes on a real PostgreSQL 18: validation problems list
 * every finding however many there are, API answers (a one-time secret's
 * above all) are never stored by a cache, and a client that goes away is not
 * logged as a server error.
 */
import { connect, type AddressInfo } from 'node:net';
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { startTestApp } from './harness/app.js';

interface ValidationProblem {
  status: number;
  code: string;
  errors: { pointer: string; code: string }[];
}

/** A body for POST /api/v1/accounts with two bad members and `extra` unknown ones. */
function badAccount(extra: number): string {
  const body: Record<string, unknown> = { name: 'n'.repeat(150), opening_balance: -5 };
  for (let i = 0; i < extra; i++) body[`x${String(i)}`] = 1;
  return JSON.stringify(body);
}

void t.test('a 400 lists every problem of the body, not an empty list', async (t) => {
  const k = await startTestApp(t);
  for (const extra of [5, 6, 12, 40]) {
    const res = await k.app.http.inject({
      method: 'POST',
      url: '/api/v1/accounts',
      headers: { ...k.alice.headers, 'content-type': 'application/json' },
      payload: badAccount(extra),
    });
    t.equal(res.statusCode, 400, `${String(extra)} unknown members`);
    const body = res.json<ValidationProblem>();
    t.equal(body.code, 'validation_failed');
    const pointers = body.errors.map((e) => e.pointer).sort();
    const expected = [
      '#body/name',
      '#body/opening_balance',
      ...Array.from({ length: extra }, (_, i) => `#body/x${String(i)}`),
    ].sort();
    t.same(pointers, expected, `all ${String(extra + 2)} problems are listed`);
  }
});

void t.test('the answer that carries a new token is never stored by a cache', async (t) => {
  const k = await startTestApp(t);
  const created = await k.app.http.inject({
    method: 'POST',
    url: '/api/v1/tokens',
    headers: {
      ...k.alice.headers,
      'content-type': 'application/json',
      'idempotency-key': newId(),
    },
    payload: '{}',
  });
  t.equal(created.statusCode, 201);
  t.equal(created.headers['cache-control'], 'no-store');
  const listed = await k.app.http.inject({ url: '/api/v1/tokens', headers: k.alice.headers });
  t.equal(listed.statusCode, 200);
  t.equal(listed.headers['cache-control'], 'no-store');
  const refused = await k.app.http.inject({ url: '/api/v1/tokens' });
  t.equal(refused.statusCode, 401);
  t.equal(refused.headers['cache-control'], 'no-store');
});

void t.test(
  'a client that resets its connection mid-body on a keyed route is no server error',
  async (t) => {
    const k = await startTestApp(t);
    await k.app.http.listen({ port: 0, host: '127.0.0.1' });
    const port = (k.app.http.server.address() as AddressInfo).port;
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', resolve));
    socket.write(
      `POST /api/v1/effects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.alice.token}\r\n` +
        `Idempotency-Key: ${newId()}\r\nContent-Type: application/json\r\n` +
        'Content-Length: 100\r\n\r\n{"label":',
    );
    const deadline = Date.now() + 5000;
    const seen = (msg: string) => k.logs.some((l) => l['msg'] === msg);
    while (!seen('incoming request') && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    socket.resetAndDestroy();
    while (!seen('client went away') && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    t.ok(seen('client went away'), 'the lost request is logged as such');
    const errors = k.logs.filter((l) => typeof l['level'] === 'number' && l['level'] >= 50);
    t.same(errors, [], 'nothing is logged at error level');
    t.same(await k.effects(), [], 'no effect');
    t.same(await k.keys(), [], 'no key row');
  },
);
