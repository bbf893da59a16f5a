/**
 * A database failover under keyed transfers: every intent takes effect
 * exactly once.
 *
 * Two PostgreSQL 18 clusters (test/harness/replication.ts): a primary and a
 * synchronous streaming standby made by a file copy. Two `api` processes and
 * one `worker` process reach the database through one address that follows
 * the primary (test/harness/forwarder.ts, the part a virtual IP or a proxy
 * with health checks plays in a deployment). Clients send keyed transfers
 * and retry each with the same key on a 5xx, a connection error, `409
 * request_in_progress` and `429`. Mid-stream the primary is stopped with
 * `pg_ctl stop -m immediate`, the standby is promoted, and the forwarder
 * switches to it; nothing is restarted.
 *
 * At the end: every intent has a final answer; every 201 names a transfer
 * that exists once; no transfer exists that no intent asked for; balances
 * equal the opening balances plus the transfers; no key row is in progress;
 * the server processes are the ones started, both api processes answered on
 * the new primary, and the worker ran a job there. What the clients saw
 * (time from the stop to the first 201 on the new primary, 5xx answers,
 * retries) is printed as comments; docs/adr/0002-scale-out.md records it.
 *
 * `SOAK=1`: more clients and transfers, several failovers back and forth,
 * the old primary rebuilt as a standby of the new one by the same file copy
 * after each, under load.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import type { Test } from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { CLEANUP_TASK } from '../../modules/sync/jobs/cleanup.js';
import { installWorkerSchema } from '../../platform/jobs/index.js';
import { runMigrations } from '../../platform/migrate/index.js';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { ensureDatabase, ensureLoginRole } from '../../platform/pg/roles.js';
import { stopProcesses } from '../e2e/processes.js';
import { startForwarder, type Forwarder } from '../harness/forwarder.js';
import { startScriptProcess, type ServerProcess } from '../harness/process.js';
import { startReplicatedPair, type ReplicatedPair } from '../harness/replication.js';
import { bySoak, soak } from '../harness/soak.js';
import {
  assertLedgerInvariants,
  eventually,
  keysInProgress,
  newPrincipal,
  openAccount,
  post,
  sleep,
  startApi,
  type ApiProcess,
} from './fault-helpers.js';

const CLIENTS = bySoak(4, 6);
const TRANSFERS_PER_CLIENT = bySoak(40, 300);
const FAILOVERS = bySoak(1, 4);
const ACCOUNTS = 6;
const OPENING = 1_000_000_000;
const DATABASE = 'failover';
/** Attempts per intent before the test gives up on it (then a failure). */
const MAX_ATTEMPTS = 400;

if (soak) t.setTimeout(30 * 60_000);

/** One attempt of one intent, as its client saw it. */
interface Attempt {
  /** When it was sent, on this process's monotonic clock (ms). */
  readonly sentAt: number;
  /** When its answer (or error) came (ms). */
  readonly endedAt: number;
  /** The status, or `error` for a connection error. */
  readonly status: number | 'error';
  /** The problem code of a 4xx or 5xx answer, when it has one. */
  readonly code: string | undefined;
}

/** One intent of a client and how it ended. */
interface Intent {
  readonly client: number;
  readonly key: string;
  readonly body: string;
  readonly attempts: Attempt[];
  final: { status: number; body: string } | undefined;
}

function codeOf(body: string): string | undefined {
  try {
    return (JSON.parse(body) as { code?: string }).code;
  } catch {
    return undefined;
  }
}

/**
 * Sends one keyed transfer until it has a final answer, by the retry rules
 * of docs/api/README.md: a connection error, a 5xx, `409
 * request_in_progress` and `429` are repeated with the same key and body
 * after a jittered backoff; anything else is final.
 */
async function deliver(base: string, token: string, intent: Intent): Promise<void> {
  for (let n = 1; n <= MAX_ATTEMPTS; n += 1) {
    const sentAt = performance.now();
    let status: number | 'error';
    let body = '';
    try {
      const answer = await post(base, '/api/v1/transfers', token, intent.body, intent.key);
      status = answer.status;
      body = answer.body;
    } catch {
      status = 'error';
    }
    const code = status === 'error' ? undefined : codeOf(body);
    intent.attempts.push({ sentAt, endedAt: performance.now(), status, code });
    const retry =
      status === 'error' ||
      status >= 500 ||
      status === 429 ||
      (status === 409 && code === 'request_in_progress');
    if (!retry && status !== 'error') {
      intent.final = { status, body };
      return;
    }
    await sleep(Math.min(10 * 2 ** Math.min(n, 5), 250) * (0.5 + Math.random() / 2));
  }
}

/** The file's two clusters, its database, and the address that follows the primary. */
interface Setup {
  readonly pair: ReplicatedPair;
  readonly forwarder: Forwarder;
  /** The application role's URL through the forwarder. */
  readonly appUrl: string;
  /** The owner role's URL through the forwarder. */
  readonly ownerUrl: string;
  readonly appRole: string;
}

async function setUp(t: Test): Promise<Setup> {
  const pair = await startReplicatedPair();
  t.teardown(() => pair.close());
  const forwarder = await startForwarder(pair.primary().port);
  t.teardown(() => forwarder.close());
  // Roles and a migrated database as the harness's before script makes them,
  // on the primary; the standby receives them by replication.
  const owner = { name: 'failover_owner', password: randomBytes(18).toString('base64url') };
  const app = { name: 'failover_app', password: randomBytes(18).toString('base64url') };
  const admin = createSql(pair.adminUrl(pair.primary()), { max: 1, applicationName: 'test-setup' });
  try {
    await ensureLoginRole(admin, owner);
    await ensureLoginRole(admin, app);
    await ensureDatabase(admin, DATABASE, owner.name);
  } finally {
    await admin.end();
  }
  const through = (user: string, password: string): string =>
    `postgres://${user}:${password}@127.0.0.1:${String(forwarder.port)}/${DATABASE}`;
  const ownerUrl = through(owner.name, owner.password);
  await runMigrations({ ownerUrl, appRole: app.name });
  await installWorkerSchema(ownerUrl, app.name);
  // graphile-migrate closes its pool about 200 ms after use; a failover must
  // not meet its last connection (its error handler exits the process).
  await sleep(300);
  return {
    pair,
    forwarder,
    appUrl: through(app.name, app.password),
    ownerUrl,
    appRole: app.name,
  };
}

/**
 * Adds a job on the current primary and waits until a worker has run it
 * (graphile-worker deletes a job that succeeded).
 */
async function workerRunsAJob(owner: Sql): Promise<void> {
  const [job] = await owner<{ id: string }[]>`
    select id::text as id from graphile_worker.add_job(${CLEANUP_TASK}, '{}'::json)`;
  await eventually(
    'the worker runs a job added on the new primary',
    async () =>
      (
        await owner`select 1 from graphile_worker._private_jobs where id = ${job?.id ?? '0'}::bigint`
      ).length === 0,
    60_000,
  );
}

/** What the clients saw around one failover. */
interface FailoverFigures {
  readonly stoppedAt: number;
  /** When `pg_ctl stop -m immediate` returned (the old primary is gone). */
  readonly downAt: number;
  readonly promotedAt: number;
  readonly switchedAt: number;
  /** Time from the stop to the first 201 of an attempt sent after the stop. */
  firstCreatedAfterMs: number | undefined;
}

function describe(intents: readonly Intent[], failovers: readonly FailoverFigures[]): string[] {
  const attempts = intents.flatMap((i) => i.attempts);
  const byStatus = new Map<string, number>();
  for (const a of attempts) {
    if (a.status === 'error' || a.status >= 300) {
      const label =
        a.status === 'error' ? 'connection error' : `${String(a.status)} ${a.code ?? ''}`;
      byStatus.set(label, (byStatus.get(label) ?? 0) + 1);
    }
  }
  const fiveXx = attempts.filter((a) => a.status !== 'error' && a.status >= 500).length;
  const retries = attempts.length - intents.length;
  const retried = intents.filter((i) => i.attempts.length > 1).length;
  return [
    `${String(intents.length)} intents by ${String(CLIENTS)} clients, ${String(attempts.length)} attempts, ` +
      `${String(retries)} retries (${String(retried)} intents retried, at most ${String(Math.max(...intents.map((i) => i.attempts.length)))} attempts for one)`,
    `5xx answers: ${String(fiveXx)}; answers other than 201: ${JSON.stringify(Object.fromEntries(byStatus))}`,
    ...failovers.map(
      (f, n) =>
        `failover ${String(n + 1)}: old primary down ${(f.downAt - f.stoppedAt).toFixed(0)} ms after the stop, ` +
        `promoted at ${(f.promotedAt - f.stoppedAt).toFixed(0)} ms, ` +
        `forwarder switched at ${(f.switchedAt - f.stoppedAt).toFixed(0)} ms, ` +
        `first 201 on the new primary ${f.firstCreatedAfterMs === undefined ? 'never' : `${f.firstCreatedAfterMs.toFixed(0)} ms`} after the stop`,
    ),
  ];
}

void t.test('a failover under keyed transfers: every intent takes effect once', async (t) => {
  const setup = await setUp(t);
  const { pair, forwarder } = setup;
  const processes: ServerProcess[] = [];
  const pools: Sql[] = [];
  t.teardown(async () => {
    await stopProcesses(processes);
    await Promise.all(pools.map((p) => p.end({ timeout: 1 }).catch(() => undefined)));
  });
  const setupApp = createSql(setup.appUrl, { max: 1, applicationName: 'test-app' });
  const token = await newPrincipal(setupApp).finally(() => setupApp.end());

  const apis: ApiProcess[] = [];
  for (let i = 1; i <= 2; i += 1) {
    const api = await startApi(setup.appUrl, { APP__NAME: `failover-api-${String(i)}` });
    processes.push(api.process);
    apis.push(api);
  }
  const worker = startScriptProcess('apps/server/main.ts', ['--role', 'worker'], {
    DATABASE__URL: setup.appUrl,
    DATABASE__POOL_MAX: '5',
    APP__NAME: 'failover-worker',
    LOG__LEVEL: 'info',
  });
  processes.push(worker);
  await worker.waitForLine((l) => l['msg'] === 'started');
  const pids = processes.map((p) => p.child.pid);

  const openings = new Map<string, bigint>();
  const accounts: string[] = [];
  for (let i = 0; i < ACCOUNTS; i += 1) {
    accounts.push(
      await openAccount(
        t,
        apis[i % 2]?.base ?? '',
        token,
        openings,
        `Account ${String(i)}`,
        OPENING,
      ),
    );
  }

  // The clients: each sends its transfers one after another to its api
  // process (clients alternate between the two).
  const intents: Intent[] = [];
  let answered = 0;
  const clients = Array.from({ length: CLIENTS }, async (_, c) => {
    const base = apis[c % 2]?.base ?? '';
    for (let i = 0; i < TRANSFERS_PER_CLIENT; i += 1) {
      const from = (c + i) % ACCOUNTS;
      const to = (from + 1 + (i % (ACCOUNTS - 1))) % ACCOUNTS;
      const intent: Intent = {
        client: c,
        key: newId(),
        body: JSON.stringify({
          from_account_id: accounts[from],
          to_account_id: accounts[to],
          amount: 1 + ((c * 7 + i * 13) % 100),
        }),
        attempts: [],
        final: undefined,
      };
      intents.push(intent);
      await deliver(base, token, intent);
      answered += 1;
    }
  });

  const total = CLIENTS * TRANSFERS_PER_CLIENT;
  const failovers: FailoverFigures[] = [];
  const operator = (async () => {
    for (let f = 1; f <= FAILOVERS; f += 1) {
      const threshold = Math.floor((total * f) / (FAILOVERS + 1));
      await eventually(
        `${String(threshold)} intents answered`,
        () => Promise.resolve(answered >= threshold),
        300_000,
      );
      const stoppedAt = performance.now();
      await pair.stopPrimary();
      const downAt = performance.now();
      await pair.promoteStandby();
      const promotedAt = performance.now();
      forwarder.switchTo(pair.primary().port);
      failovers.push({
        stoppedAt,
        downAt,
        promotedAt,
        switchedAt: performance.now(),
        firstCreatedAfterMs: undefined,
      });
      // The next failover needs a standby again: the old primary, rebuilt
      // from the new one under load.
      if (f < FAILOVERS) await pair.rebuildStandby();
    }
  })();
  await Promise.all([...clients, operator]);

  for (const f of failovers) {
    const after = intents
      .flatMap((i) => i.attempts)
      .filter((a) => a.status === 201 && a.sentAt >= f.stoppedAt)
      .map((a) => a.endedAt);
    f.firstCreatedAfterMs = after.length === 0 ? undefined : Math.min(...after) - f.stoppedAt;
  }
  for (const line of describe(intents, failovers)) t.comment(line);
  for (const [n, api] of apis.entries()) {
    const errors = new Map<string, number>();
    for (const line of api.process.lines) {
      if (typeof line['level'] === 'number' && line['level'] >= 50) {
        const msg = String(line['msg']);
        errors.set(msg, (errors.get(msg) ?? 0) + 1);
      }
    }
    t.comment(
      `api process ${String(n + 1)} logged errors: ${JSON.stringify(Object.fromEntries(errors))}`,
    );
  }

  t.equal(intents.length, total);
  t.same(
    intents.filter((i) => i.final === undefined).map((i) => i.key),
    [],
    'every intent has a final answer',
  );
  t.same(
    intents.filter((i) => i.final?.status !== 201).map((i) => [i.key, i.final]),
    [],
    'every final answer is a 201',
  );
  t.equal(failovers.length, FAILOVERS, 'every failover happened');
  t.same(
    failovers
      .map((f, n) => ({ n: n + 1, f }))
      .filter(
        ({ f }) =>
          !intents.some((i) =>
            i.attempts.some(
              (a) =>
                a.sentAt < f.switchedAt &&
                a.endedAt > f.stoppedAt &&
                (a.status === 'error' || a.status >= 500),
            ),
          ),
      )
      .map(({ n }) => n),
    [],
    'each failover hit requests in flight: some failed with a 5xx or a broken connection and were retried',
  );
  const last = failovers[failovers.length - 1];
  for (const [n, api] of apis.entries()) {
    t.ok(
      intents.some(
        (i) =>
          i.client % 2 === n &&
          i.attempts.some(
            (a) => a.status === 201 && last !== undefined && a.sentAt >= last.switchedAt,
          ),
      ),
      `api process ${String(n + 1)} answered 201 on the new primary without a restart`,
    );
    t.equal(api.process.child.exitCode, null, `api process ${String(n + 1)} is still running`);
  }
  t.same(
    processes.map((p) => p.child.pid),
    pids,
    'the processes are the ones started',
  );

  const owner = createSql(setup.ownerUrl, { max: 2, applicationName: 'test-owner' });
  pools.push(owner);
  const [where] = await owner<{ port: number; recovery: boolean }[]>`
    select current_setting('port')::int as port, pg_is_in_recovery() as recovery`;
  t.same(where, { port: pair.primary().port, recovery: false }, 'the checks read the new primary');

  const createdIds = intents
    .filter((i) => i.final?.status === 201)
    .map((i) => (JSON.parse(i.final?.body ?? '{}') as { id: string }).id)
    .sort();
  const transfers = await owner<{ id: string }[]>`select id from ledger_transfers order by id`;
  t.equal(new Set(createdIds).size, createdIds.length, 'every 201 names a transfer of its own');
  t.same(
    transfers.map((r) => r.id),
    createdIds,
    'every 201 transfer exists exactly once, and no other transfer exists',
  );
  const keyRows = await owner<{ key: string; resource_id: string | null }[]>`
    select key, resource_id from idempotency_keys where action = 'createTransfer'`;
  const byKey = new Map(keyRows.map((r) => [r.key, r.resource_id]));
  t.equal(keyRows.length, total, 'one key row per intent');
  t.same(
    intents
      .filter((i) => byKey.get(i.key) !== (JSON.parse(i.final?.body ?? '{}') as { id?: string }).id)
      .map((i) => i.key),
    [],
    "each intent's key row names the transfer its client got",
  );
  t.same(await keysInProgress(owner), [], 'no key row is left in progress');
  await assertLedgerInvariants(t, owner, openings);

  await workerRunsAJob(owner);
  t.equal(
    worker.child.exitCode,
    null,
    'the worker ran a job on the new primary and is still running',
  );

  t.same(await stopProcesses(processes), [0, 0, 0], 'every process drains and exits 0');
});

void t.test(
  "the api's pool with both hosts and target_session_attrs finds the promoted standby",
  async (t) => {
    // What the api processes would do without the forwarder: postgres.js
    // takes a host list and connects only to the node that accepts writes.
    // The server's database.url refuses such a URL today (see the report in
    // docs/adr/0002-scale-out.md), so this drives the api's pool factory
    // directly, on the same two clusters and the same failover.
    const pair = await startReplicatedPair();
    t.teardown(() => pair.close());
    const [a, b] = pair.nodes;
    const hosts = `127.0.0.1:${String(a.port)},127.0.0.1:${String(b.port)}`;
    const credentials = new URL(pair.adminUrl(a));
    const url = `postgres://${credentials.username}:${credentials.password}@${hosts}/postgres?target_session_attrs=read-write`;
    const sql = createSql(url, { max: 2, applicationName: 'test-multihost' });
    t.teardown(() => sql.end({ timeout: 1 }).catch(() => undefined));
    const where = async (): Promise<{ port: number; recovery: boolean } | undefined> =>
      (
        await sql<{ port: number; recovery: boolean }[]>`
          select current_setting('port')::int as port, pg_is_in_recovery() as recovery`
      )[0];
    t.same(await where(), { port: a.port, recovery: false }, 'the pool connects to the primary');
    await sql`create table probe (n int primary key)`;

    // A writer inserts one row after another, before, during and after the
    // failover; a failed insert is counted and the next one tried.
    const acked: number[] = [];
    let failures = 0;
    // Written by the failover below while the writer runs.
    const phase = { stoppedAt: 0, promoted: false };
    let firstAfter: number | undefined;
    const writer = (async () => {
      for (let n = 1; ; n += 1) {
        const sentAt = performance.now();
        try {
          await sql`insert into probe values (${n})`;
          acked.push(n);
          if (phase.promoted && sentAt >= phase.stoppedAt && firstAfter === undefined) {
            firstAfter = performance.now() - phase.stoppedAt;
          }
          if (firstAfter !== undefined && acked.length >= 40) return;
        } catch {
          failures += 1;
          await sleep(20);
        }
      }
    })();
    await eventually('the writer is under way', () => Promise.resolve(acked.length >= 20));
    phase.stoppedAt = performance.now();
    await pair.stopPrimary();
    await pair.promoteStandby();
    phase.promoted = true;
    await writer;
    t.comment(
      `multi-host pool: first write on the new primary ${firstAfter?.toFixed(0) ?? 'never'} ms after the stop, ` +
        `${String(failures)} failed statements, ${String(acked.length)} acknowledged`,
    );
    t.same(
      await where(),
      { port: b.port, recovery: false },
      'the same pool, not restarted, now reaches the promoted standby',
    );
    const present = new Set((await sql<{ n: number }[]>`select n from probe`).map((r) => r.n));
    t.same(
      acked.filter((n) => !present.has(n)),
      [],
      'every acknowledged write, before and after the stop, is on the new primary',
    );
  },
);
