/**
 * One trace per client intent, across processes: the server as a real
 * process with tracing on, exporting to a real OTLP/HTTP listener; the
 * client's command line as real processes. A client killed after its
 * transfer was sent and before the answer came back, and a second client
 * process that drains the outbox and repeats the intent under the same
 * key, make two attempts whose server spans are in ONE trace, the trace
 * the key names (docs/DECISIONS.md, "One trace per client intent, from
 * its key"): each request span a child of its own attempt's span, the
 * first attempt fresh, the second replayed, one transfer in the ledger.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { systemClock } from '../../kernel/clock/index.js';
import { newId } from '../../kernel/ids/index.js';
import { createPrincipalWithToken } from '../../modules/identity/index.js';
import { testDatabase } from '../harness/db.js';
import { otlpSink } from '../harness/otlp-sink.js';
import { startServerProcess } from '../harness/process.js';
import { testUnitOfWork } from '../harness/uow.js';
import { runClient, startClient, startHoldProxy } from './client-processes.js';
import { stopProcesses } from './processes.js';

void t.test("a client retry after a cut-off attempt joins the first attempt's trace", async (t) => {
  const db = await testDatabase(t);
  const { db: pg, uow } = testUnitOfWork(t, db, { sql: db.app });
  const { token } = await createPrincipalWithToken(
    { db: pg, uow, clock: systemClock },
    { displayName: 'Traced client' },
  );
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-trace-'));
  const sink = await otlpSink(t);
  const server = startServerProcess(['--role', 'api'], {
    DATABASE__URL: db.appUrl,
    DATABASE__POOL_MAX: '4',
    HTTP__PORT: '0',
    HTTP__RATE_LIMIT_MAX: '10000',
    LOG__LEVEL: 'info',
    TRACING__ENABLED: 'true',
    TRACING__ENDPOINT: sink.url,
    TRACING__SAMPLING_RATIO: '1',
  });
  t.teardown(async () => {
    await stopProcesses([server]);
    await fs.rm(dir, { recursive: true, force: true });
  });
  const base = (await server.waitForLine((l) => l['msg'] === 'listening'))['address'] as string;

  const accounts: string[] = [];
  for (const [name, opening] of [
    ['From', 1_000],
    ['To', 0],
  ] as const) {
    const res = await fetch(`${base}/api/v1/accounts`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        'idempotency-key': newId(),
      },
      body: JSON.stringify({ name, opening_balance: opening }),
    });
    t.equal(res.status, 201, 'account opened');
    accounts.push(((await res.json()) as { id: string }).id);
  }
  const [from, to] = accounts as [string, string];

  // The first process: its transfer reaches the server and commits; a
  // proxy keeps the answer from it, and it is killed while it waits.
  const proxy = await startHoldProxy(t, base);
  proxy.mode = 'hold-answer';
  const env = { CLIENT_OUTBOX: path.join(dir, 'outbox.sqlite'), CLIENT_TOKEN: token };
  const first = startClient(
    ['transfer', '--from', from, '--to', to, '--amount', '250', '--json', '--wait', '60s'],
    { ...env, CLIENT_BASE_URL: proxy.base },
    t,
  );
  const held = await proxy.held();
  t.equal(held.status, 201, 'the first attempt committed');
  first.child.kill('SIGKILL');
  t.same(await first.exited, { code: null, signal: 'SIGKILL' });

  // The second process repeats the intent from the outbox, straight to the server.
  const second = await runClient(['outbox', 'drain', '--json'], { ...env, CLIENT_BASE_URL: base });
  t.equal(second.code, 0, second.err);
  t.match(JSON.parse(second.out), {
    settled: [{ key: held.key, state: 'done', answer: { status: 201, replayed: true } }],
  });

  // The server flushes what it buffered on its way out.
  t.same(await stopProcesses([server]), [0], 'the server drained and exited');
  const traceId = createHash('sha256').update(held.key).digest('hex').slice(0, 32);
  const transfers = sink.spans.filter(
    (s) => s.name === 'request' && s.attributes['http.route'] === '/api/v1/transfers',
  );
  t.equal(transfers.length, 2, 'two attempts reached the server');
  t.same(
    transfers.map((s) => s.traceId),
    [traceId, traceId],
    'both in the trace the key names',
  );
  const parents = transfers.map((s) => s.parentSpanId);
  t.ok(
    parents.every((p) => /^[0-9a-f]{16}$/.test(p)),
    `each a child of its attempt's span (${parents.join(', ')})`,
  );
  t.not(parents[0], parents[1], 'each attempt a span of its own');
  const outcomes = sink.spans
    .filter((s) => s.traceId === traceId && s.name === 'idempotency')
    .map((s) => [s.attributes['idempotency.outcome'], s.attributes['http.response.status_code']]);
  t.same(
    outcomes,
    [
      ['stored', 201],
      ['replayed', 201],
    ],
    'the first attempt ran, the second replayed',
  );
  t.notOk(
    JSON.stringify(sink.spans.map((s) => [s.name, s.attributes, s.rest])).includes(held.key),
    'the key itself is in no span',
  );
  const rows = await db.owner<{ n: string }[]>`
    select count(*)::text as n from ledger_transfers where from_account_id = ${from}`;
  t.equal(rows[0]?.n, '1', 'one transfer');
});
