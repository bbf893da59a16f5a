/**
 * The client's outbox end to end: real server processes on a real
 * PostgreSQL, the client's command line as real processes. A client killed
 * after sending and before the answer, restarted, moves the money once; a
 * client whose server is down keeps its intents and delivers them once the
 * server is back; a repeat that meets its first request still running gets
 * 409, waits Retry-After and gets the replay; a key used for another
 * request is reported as the caller's bug, never sent under a new key.
 * Every claim is checked in the ledger's tables.
 */
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { systemClock } from '../../kernel/clock/index.js';
import { newId } from '../../kernel/ids/index.js';
import { createPrincipalWithToken } from '../../modules/identity/index.js';
import { Outbox } from '../../apps/client/outbox.js';
import { testDatabase, type TestDatabase } from '../harness/db.js';
import { testUnitOfWork } from '../harness/uow.js';
import { startServerProcess, type ServerProcess } from '../harness/process.js';
import { runClient, startClient, startHoldProxy } from './client-processes.js';
import { stopProcesses } from './processes.js';

const OPENING = 10_000;
const AMOUNT = 2_500;

interface World {
  readonly db: TestDatabase;
  readonly token: string;
  readonly dir: string;
  server(env?: Record<string, string>): Promise<{ base: string; process: ServerProcess }>;
}

async function world(t: Test): Promise<World> {
  const db = await testDatabase(t);
  const { db: pg, uow } = testUnitOfWork(t, db, { sql: db.app });
  const { token } = await createPrincipalWithToken(
    { db: pg, uow, clock: systemClock },
    { displayName: 'Client tester' },
  );
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-e2e-'));
  const processes: ServerProcess[] = [];
  t.teardown(async () => {
    await stopProcesses(processes);
    await fs.rm(dir, { recursive: true, force: true });
  });
  return {
    db,
    token,
    dir,
    server: async (env = {}) => {
      const p = startServerProcess(['--role', 'api'], {
        DATABASE__URL: db.appUrl,
        DATABASE__POOL_MAX: '4',
        HTTP__PORT: '0',
        HTTP__RATE_LIMIT_MAX: '10000',
        LOG__LEVEL: 'info',
        ...env,
      });
      processes.push(p);
      const line = await p.waitForLine((l) => l['msg'] === 'listening');
      return { base: line['address'] as string, process: p };
    },
  };
}

async function openAccount(
  base: string,
  token: string,
  name: string,
  opening: number,
): Promise<string> {
  const res = await fetch(`${base}/api/v1/accounts`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      'idempotency-key': newId(),
    },
    body: JSON.stringify({ name, opening_balance: opening }),
  });
  if (res.status !== 201) throw new Error(`account: ${String(res.status)} ${await res.text()}`);
  return ((await res.json()) as { id: string }).id;
}

async function ledger(db: TestDatabase, a: string, b: string) {
  const transfers = await db.owner<{ id: string; amount: string }[]>`
    select id, amount::text from ledger_transfers
     where from_account_id in (${a}, ${b}) or to_account_id in (${a}, ${b}) order by created_at`;
  const balances = await db.owner<{ id: string; balance: string }[]>`
    select id, balance::text from ledger_accounts where id in (${a}, ${b})`;
  return {
    transfers: transfers.map((r) => ({ id: r.id, amount: Number(r.amount) })),
    balances: Object.fromEntries(balances.map((r) => [r.id, Number(r.balance)])),
  };
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

/**
 * A gateway in front of the API: it passes GET requests on to `upstream`
 * and answers every write itself, 404 without Idempotent-Replay.
 */
async function startGateway(t: Test, upstream: string): Promise<string> {
  const gateway = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'GET') {
        void fetch(`${upstream}${req.url ?? ''}`, {
          headers: { authorization: req.headers.authorization ?? '' },
        }).then(async (up) => {
          res.writeHead(up.status, { 'content-type': 'application/json' });
          res.end(await up.text());
        });
        return;
      }
      res.writeHead(404, { 'content-type': 'application/problem+json' });
      res.end(JSON.stringify({ code: 'not_found', detail: 'no route' }));
    });
  });
  gateway.listen(0, '127.0.0.1');
  await once(gateway, 'listening');
  t.teardown(() => {
    gateway.closeAllConnections();
    gateway.close();
  });
  const { port } = gateway.address() as AddressInfo;
  return `http://127.0.0.1:${String(port)}`;
}

void t.test('the outbox end to end', async (t) => {
  const w = await world(t);
  const { base } = await w.server();

  /** A transfer whose answer a proxy holds, its client killed meanwhile. */
  const killedAfterSending = async (t: Test, file: string) => {
    const a = await openAccount(base, w.token, 'From', OPENING);
    const b = await openAccount(base, w.token, 'To', 0);
    const proxy = await startHoldProxy(t, base);
    proxy.mode = 'hold-answer';
    const env = { CLIENT_OUTBOX: path.join(w.dir, file), CLIENT_TOKEN: w.token };
    const client = startClient(
      ['transfer', '--from', a, '--to', b, '--amount', String(AMOUNT), '--json', '--wait', '60s'],
      { ...env, CLIENT_BASE_URL: proxy.base },
      t,
    );
    const held = await proxy.held();
    const transfersAtKill = (await ledger(w.db, a, b)).transfers.length;
    client.child.kill('SIGKILL');
    return { a, b, env, held, transfersAtKill, exited: await client.exited };
  };

  await t.test(
    'killed after sending, before the answer: the restart replays, one transfer',
    async (t) => {
      const { a, b, env, held, transfersAtKill, exited } = await killedAfterSending(
        t,
        'killed.sqlite',
      );
      t.equal(held.status, 201, 'the server committed the transfer and answered');
      t.equal(transfersAtKill, 1);
      t.same(exited, { code: null, signal: 'SIGKILL' });

      const left = Outbox.open(env.CLIENT_OUTBOX);
      const pending = left.list();
      left.close();
      // t.match on an array ignores extra elements: the length is checked too.
      t.equal(pending.length, 1, 'one intent, no second key');
      t.match(
        pending,
        [{ state: 'pending', key: held.key, attempts: 1, attemptStartedAt: Number }],
        'the intent outlived the process, its attempt counted',
      );

      const restart = await runClient(['outbox', 'drain', '--json'], {
        ...env,
        CLIENT_BASE_URL: base,
      });
      t.equal(restart.code, 0, restart.err);
      const doc = JSON.parse(restart.out) as {
        settled: {
          key: string;
          state: string;
          answer: { status: number; replayed: boolean; body: unknown };
        }[];
      };
      t.equal(doc.settled.length, 1);
      t.match(doc.settled, [
        { key: held.key, state: 'done', answer: { status: 201, replayed: true } },
      ]);
      t.same(
        doc.settled[0]?.answer.body,
        JSON.parse(held.body),
        'the answer the dead process never got',
      );
      const after = await ledger(w.db, a, b);
      t.equal(after.transfers.length, 1, 'exactly one transfer row');
      t.same(after.balances, { [a]: OPENING - AMOUNT, [b]: AMOUNT }, 'the money moved once');
    },
  );

  await t.test(
    'killed before the request reached the server: the restart runs it once',
    async (t) => {
      const a = await openAccount(base, w.token, 'From', OPENING);
      const b = await openAccount(base, w.token, 'To', 0);
      const proxy = await startHoldProxy(t, base);
      proxy.mode = 'hold-request';
      const env = { CLIENT_OUTBOX: path.join(w.dir, 'early.sqlite'), CLIENT_TOKEN: w.token };
      const client = startClient(
        ['transfer', '--from', a, '--to', b, '--amount', String(AMOUNT), '--json'],
        { ...env, CLIENT_BASE_URL: proxy.base },
        t,
      );
      const held = await proxy.held();
      client.child.kill('SIGKILL');
      await client.exited;
      t.equal((await ledger(w.db, a, b)).transfers.length, 0, 'nothing reached the server');
      const left = Outbox.open(env.CLIENT_OUTBOX);
      const intents = left.list();
      left.close();
      t.equal(intents.length, 1);
      t.match(intents, [{ key: held.key, attempts: 1 }], 'the attempt that left is counted');
      const restart = await runClient(['outbox', 'drain', '--json'], {
        ...env,
        CLIENT_BASE_URL: base,
      });
      t.equal(restart.code, 0, restart.err);
      const restartDoc = JSON.parse(restart.out) as { settled: unknown[] };
      t.equal(restartDoc.settled.length, 1);
      t.match(restartDoc, {
        settled: [{ key: held.key, state: 'done', answer: { status: 201, replayed: false } }],
      });
      const after = await ledger(w.db, a, b);
      t.equal(after.transfers.length, 1);
      t.same(after.balances, { [a]: OPENING - AMOUNT, [b]: AMOUNT });
    },
  );

  await t.test(
    'killed after sending, then a gateway refuses the repeat: outcome unknown, not refused',
    async (t) => {
      const { a, b, env, held } = await killedAfterSending(t, 'gateway.sqlite');
      const drained = await runClient(['outbox', 'drain'], {
        ...env,
        CLIENT_BASE_URL: await startGateway(t, base),
      });
      t.equal(drained.code, 3, drained.err);
      t.match(
        drained.out,
        new RegExp(
          `^failed  createTransfer ${held.key}: outcome unknown: 404 not_found: no route without Idempotent-Replay.*an attempt may have taken effect: check`,
        ),
      );
      const listed = await runClient(['outbox', 'list', '--json'], env);
      const listedDoc = JSON.parse(listed.out) as { intents: unknown[] };
      t.equal(listedDoc.intents.length, 1, 'no new intent, no new key');
      t.match(listedDoc, {
        intents: [
          {
            key: held.key,
            state: 'failed',
            failure: 'outcome_unknown',
            // The lost attempt, the gateway's 404, and the one repeat
            // after it (an unmarked answer is repeated once: a gateway may have
            // replaced the server's; see docs/DECISIONS.md).
            attempts: 3,
            answer: { status: 404, marked: false },
          },
        ],
      });
      const after = await ledger(w.db, a, b);
      t.equal(after.transfers.length, 1, 'the first attempt did take effect');
      t.same(after.balances, { [a]: OPENING - AMOUNT, [b]: AMOUNT });
    },
  );

  await t.test('the server down while intents are queued: delivered once it is back', async (t) => {
    const a = await openAccount(base, w.token, 'From', OPENING);
    const b = await openAccount(base, w.token, 'To', 0);
    const port = await freePort();
    const down = `http://127.0.0.1:${String(port)}`;
    const env = {
      CLIENT_OUTBOX: path.join(w.dir, 'down.sqlite'),
      CLIENT_TOKEN: w.token,
      CLIENT_BASE_URL: down,
    };
    const first = await runClient(
      ['transfer', '--from', a, '--to', b, '--amount', '1000', '--wait', '0', '--json'],
      env,
    );
    t.equal(first.code, 75, 'still pending: exit 75');
    t.match(JSON.parse(first.out), { intent: { state: 'pending' }, pending: 1 });
    t.ok(
      first.events.some((e) => e['event'] === 'retry' && /ECONNREFUSED/.test(String(e['error']))),
    );

    const second = startClient(
      [
        'transfer',
        '--from',
        a,
        '--to',
        b,
        '--amount',
        '1500',
        '--wait',
        '60s',
        '--json',
        '--retry-cap',
        '500ms',
      ],
      env,
      t,
    );
    await second.waitForEvent((e) => e['event'] === 'retry');
    t.equal((await ledger(w.db, a, b)).transfers.length, 0, 'nothing delivered while down');
    await w.server({ HTTP__PORT: String(port) });
    const { code } = await second.exited;
    t.equal(code, 0, second.stderr());
    const doc = JSON.parse(second.stdout()) as {
      intent: { state: string; answer: { status: number } };
      settled: { state: string; request: { amount: number }; answer: { status: number } }[];
      pending: number;
    };
    t.equal(doc.settled.length, 1);
    t.match(doc, {
      intent: { state: 'done', request: { amount: 1500 }, answer: { status: 201 } },
      settled: [{ state: 'done', request: { amount: 1000 }, answer: { status: 201 } }],
      pending: 0,
    });
    const after = await ledger(w.db, a, b);
    t.same(
      after.transfers.map((x) => x.amount),
      [1000, 1500],
      'both, once each, in the order stated',
    );
    t.same(after.balances, { [a]: OPENING - 2500, [b]: 2500 });
  });

  await t.test('409 request_in_progress, Retry-After honoured, then the replay', async (t) => {
    const a = await openAccount(base, w.token, 'From', OPENING);
    const b = await openAccount(base, w.token, 'To', 0);
    // The first request waits behind a row lock on a server that waits long;
    // the client's repeat goes to a server that gives up on the key soon.
    const patient = await w.server({ DATABASE__LOCK_TIMEOUT: '30s' });
    const hasty = await w.server({ DATABASE__LOCK_TIMEOUT: '200ms' });
    const key = newId();
    const body = { from_account_id: a, to_account_id: b, amount: AMOUNT };
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const holder = w.db.owner.begin(async (tx) => {
      await tx`select id from ledger_accounts where id = ${a} for update`;
      locked();
      await released;
    });
    await isLocked;
    const firstAnswer = fetch(`${patient.base}/api/v1/transfers`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${w.token}`,
        'content-type': 'application/json',
        'idempotency-key': key,
      },
      body: JSON.stringify(body),
    });
    // Wait until the first request is blocked on the lock (its key row taken).
    for (let i = 0; i < 200; i += 1) {
      const [row] = await w.db.owner<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
         where datname = current_database() and wait_event_type = 'Lock'`;
      if ((row?.n ?? 0) > 0) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    const client = startClient(
      ['transfer', '--from', a, '--to', b, '--amount', String(AMOUNT), '--key', key, '--json'],
      {
        CLIENT_OUTBOX: path.join(w.dir, 'busy.sqlite'),
        CLIENT_TOKEN: w.token,
        CLIENT_BASE_URL: hasty.base,
      },
      t,
    );
    const retry = await client.waitForEvent((e) => e['event'] === 'retry');
    t.equal(retry['error'], '409 request_in_progress');
    t.ok(
      Number(retry['delay_ms']) >= 1_000,
      `waits Retry-After (1 s): ${String(retry['delay_ms'])} ms`,
    );
    release();
    await holder;
    const first = await firstAnswer;
    const firstBody = await first.text();
    t.equal(first.status, 201);
    const { code } = await client.exited;
    t.equal(code, 0, client.stderr());
    const doc = JSON.parse(client.stdout()) as {
      intent: {
        key: string;
        attempts: number;
        answer: { status: number; replayed: boolean; body: unknown };
      };
    };
    t.match(doc.intent, { key, answer: { status: 201, replayed: true } });
    t.ok(doc.intent.attempts >= 2, 'one attempt got 409, a later one the replay');
    t.same(doc.intent.answer.body, JSON.parse(firstBody), 'the stored answer of the first request');
    const after = await ledger(w.db, a, b);
    t.equal(after.transfers.length, 1);
    t.same(after.balances, { [a]: OPENING - AMOUNT, [b]: AMOUNT });
  });

  await t.test(
    '422 idempotency_key_reuse is reported as the caller bug, never retried',
    async (t) => {
      const a = await openAccount(base, w.token, 'From', OPENING);
      const b = await openAccount(base, w.token, 'To', 0);
      const key = newId();
      const direct = await fetch(`${base}/api/v1/transfers`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${w.token}`,
          'content-type': 'application/json',
          'idempotency-key': key,
        },
        body: JSON.stringify({ from_account_id: a, to_account_id: b, amount: 100 }),
      });
      t.equal(direct.status, 201);
      const env = {
        CLIENT_OUTBOX: path.join(w.dir, 'reuse.sqlite'),
        CLIENT_TOKEN: w.token,
        CLIENT_BASE_URL: base,
      };
      const reused = await runClient(
        ['transfer', '--from', a, '--to', b, '--amount', '200', '--key', key],
        env,
      );
      t.equal(reused.code, 3, 'exit 3: failed');
      t.match(
        reused.out,
        new RegExp(
          `^transfer ${key}: FAILED: 422 idempotency_key_reuse: the key was used for another request, a bug of the caller`,
        ),
      );
      t.equal(
        (reused.err.match(/^sending createTransfer/gm) ?? []).length,
        1,
        'one attempt, no retry',
      );
      const listed = await runClient(['outbox', 'list', '--state', 'failed', '--json'], env);
      const failed = JSON.parse(listed.out) as { intents: unknown[] };
      t.equal(failed.intents.length, 1);
      t.match(failed, {
        intents: [
          {
            key,
            failure: 'key_reuse',
            attempts: 1,
            answer: { status: 422, body: { code: 'idempotency_key_reuse' } },
          },
        ],
      });
      const after = await ledger(w.db, a, b);
      t.same(
        after.transfers.map((x) => x.amount),
        [100],
        'only the first request took effect',
      );
    },
  );
});
