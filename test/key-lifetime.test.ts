/**
 * The server tells clients how long it keeps a key: every answer of a keyed
 * request (first, replay, and the answers not stored) and `GET /api/v1/me`
 * carry `Idempotency-Key-Lifetime`, the configured
 * `sync.idempotency_key_ttl` in whole seconds; the API document says so.
 * Through the real application on a real PostgreSQL 18.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { EXIT, runCli } from '../apps/client/index.js';
import { newId } from '../kernel/ids/index.js';
import { startTestApp } from './harness/app.js';
import { FINAL_PROBLEMS } from '../platform/http/idempotency/attempt.js';

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

void t.test(
  'the API document declares the header where it is sent, and what a key stores',
  async (t) => {
    const k = await startTestApp(t);
    const doc = (await k.app.http.inject({ url: '/docs/json' })).json<{
      paths: Record<
        string,
        Record<
          string,
          {
            operationId?: string;
            parameters?: { name: string; in: string; schema?: Record<string, unknown> }[];
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
        if (isKeyed) {
          keyed += 1;
          // The list the client reads (apps/client/api-types.ts) is the one the attempt applies.
          const header = (op.parameters ?? []).find((p) => p.name === 'Idempotency-Key');
          t.same(
            header?.schema?.['x-stored-error-statuses'],
            [...FINAL_PROBLEMS].sort((a, b) => a - b),
            `${method.toUpperCase()} ${path} lists the error statuses a key stores`,
          );
        }
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
  },
);

void t.test('the client learns the lifetime and warns of a --key-ttl that disagrees', async (t) => {
  const k = await startTestApp(t, { env: { SYNC__IDEMPOTENCY_KEY_TTL: '36h' } });
  const address = await k.app.http.listen({ host: '127.0.0.1', port: 0 });
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'key-lifetime-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const env = {
    CLIENT_OUTBOX: path.join(dir, 'outbox.sqlite'),
    CLIENT_BASE_URL: address,
    CLIENT_TOKEN: k.alice.token,
  };
  const run = async (argv: string[]) => {
    let out = '';
    let err = '';
    const code = await runCli(argv, env, {
      stdout: {
        write: (s: string, done?: (e?: Error | null) => void) => {
          out += s;
          done?.();
          return true;
        },
      },
      stderr: { write: (s: string) => ((err += s), true) },
    });
    return { code, out, err };
  };
  const quiet = await run(['accounts', 'create', '--name', 'Checking']);
  t.equal(quiet.code, EXIT.ok, quiet.err);
  t.notMatch(quiet.err, /warning/, 'no --key-ttl: the server is followed, nothing to warn of');
  const told = await run(['accounts', 'create', '--name', 'Savings', '--key-ttl', '48h']);
  t.equal(told.code, EXIT.ok, told.err);
  t.match(
    told.err,
    /^client: warning: the key TTL 2d given \(--key-ttl\) is not what the server keeps keys for, 36h \(its Idempotency-Key-Lifetime\): the shorter, 36h, is used; drop --key-ttl to follow the server$/m,
  );
});
