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
 * switches to it; no server process is restarted. While the primary is
 * down one client process is SIGKILLed (another at each failover) and a new
 * process is started on its outbox: it drains what the killed one left,
 * with the same keys.
 *
 * The load lasts through every failover: a client that has drained its
 * outbox states more transfers until the test creates a stop file, once the
 * last failover is behind it and both api processes have answered on the
 * new primary. After each promotion the new primary's keys and indexes are
 * checked (no key twice, by a sequential scan; amcheck's `bt_index_check`
 * with `heapallindexed` and `checkunique` on every index), so a standby copy
 * that lost a row or an index entry fails at the failover where it shows.
 *
 * At the end: every intent has a final answer; every 201 names a transfer
 * that exists once; no transfer exists that no intent asked for; balances
 * equal the opening balances plus the transfers; no key row is in progress;
 * the server processes are the ones started, both api processes answered on
 * the new primary, and the worker ran a job there. What the clients saw
 * (time from the stop to the first 201 on the new primary, 5xx answers,
 * retries) is printed as comments; docs/adr/0002-scale-out.md records it.
 * When the database holds more key rows or transfers than the answers, the
 * outboxes, the processes' lines and both data folders are kept in a folder
 * under the OS temp folder, named in a comment, for reading.
 *
 * `SOAK=1`: more clients and transfers, several failovers back and forth,
 * the old primary rebuilt as a standby of the new one by the same file copy
 * after each, under load.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { Outbox, type Intent } from '../../apps/client/outbox.js';
import { CLEANUP_TASK } from '../../modules/sync/index.js';
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
/** How long a client may drain: a broken run ends with intents pending, it does not hang. */
const DRAIN_DEADLINE_MS = bySoak(120_000, 1_500_000);

if (soak) t.setTimeout(30 * 60_000);

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
  // amcheck, for the check after each promotion (replicated like the rest).
  const superuser = createSql(pair.adminUrl(pair.primary(), DATABASE), {
    max: 1,
    applicationName: 'test-setup',
  });
  try {
    await superuser`create extension if not exists amcheck`;
  } finally {
    await superuser.end();
  }
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

/**
 * What is wrong with the current primary's copy of the data, as far as a
 * sequential scan and amcheck can tell: a key row twice (the primary key did
 * not see the first), or an index that does not match its table.
 *
 * @returns one line per problem; empty when there is none.
 */
async function consistencyProblems(pair: ReplicatedPair): Promise<string[]> {
  const sql = createSql(pair.adminUrl(pair.primary(), DATABASE), {
    max: 1,
    applicationName: 'test-consistency',
  });
  try {
    return await sql.begin(async (tx) => {
      // The primary key's own index must not answer this question.
      await tx`set local enable_indexscan = off`;
      await tx`set local enable_indexonlyscan = off`;
      await tx`set local enable_bitmapscan = off`;
      const twice = await tx<{ key: string; rows: number }[]>`
        select key::text as key, count(*)::int as rows from idempotency_keys
         group by principal_id, key having count(*) > 1`;
      const problems = twice.map((r) => `key ${r.key} has ${String(r.rows)} rows`);
      const indexes = await tx<{ oid: number; name: string }[]>`
        select c.oid::int as oid, c.relname as name
          from pg_class c join pg_am am on am.oid = c.relam
         where c.relkind = 'i' and am.amname = 'btree'
           and c.relnamespace = 'public'::regnamespace
         order by c.relname`;
      for (const index of indexes) {
        await tx`savepoint amcheck`;
        try {
          await tx`select bt_index_check(${index.oid}::regclass, true, true)`;
          await tx`release savepoint amcheck`;
        } catch (err) {
          await tx`rollback to savepoint amcheck`;
          problems.push(`${index.name}: ${(err as Error).message}`);
        }
      }
      return problems;
    });
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** One JSON line of a client process (see failover-client.ts). */
interface ClientLine {
  readonly at: number;
  readonly msg: string;
  readonly key?: string;
  readonly attempt?: number;
  readonly error?: string;
  readonly status?: number;
  /** On a `stated` line: how many transfers were stated. */
  readonly transfers?: number;
  /** On a `resumed` line: how many intents the outbox held pending. */
  readonly pending?: number;
}

/** A client process, its outbox and its api process. */
interface ClientProcess {
  readonly index: number;
  readonly api: number;
  readonly outbox: string;
  /** The running process: the last one started on the outbox. */
  process: ServerProcess;
  /** Processes killed earlier on the same outbox, their lines kept. */
  readonly killed: ServerProcess[];
  /** Starts a process on the outbox again. */
  readonly restart: () => ServerProcess;
}

function linesOf(client: ClientProcess): ClientLine[] {
  return [...client.killed, client.process].flatMap((p) => p.lines) as unknown as ClientLine[];
}

/** When each attempt (key and number) started, by the client's own line. */
function attemptStarts(clients: readonly ClientProcess[]): Map<string, number> {
  const starts = new Map<string, number>();
  for (const c of clients) {
    for (const l of linesOf(c)) {
      if (l.msg === 'attempt') starts.set(`${l.key ?? ''}#${String(l.attempt)}`, l.at);
    }
  }
  return starts;
}

/** What the clients saw around one failover (wall-clock ms). */
interface FailoverFigures {
  readonly stoppedAt: number;
  /** When `pg_ctl stop -m immediate` returned (the old primary is gone). */
  readonly downAt: number;
  readonly promotedAt: number;
  readonly switchedAt: number;
}

/**
 * The figures the ADR records, from the clients' lines: per failover the
 * time from the stop to the first 201 of an attempt started after the old
 * primary had exited (an attempt started between the stop command and the
 * exit can still commit on the old primary, synchronously replicated);
 * overall the retries and what they met.
 */
function describe(
  clients: readonly ClientProcess[],
  intents: readonly Intent[],
  failovers: readonly FailoverFigures[],
): string[] {
  const starts = attemptStarts(clients);
  const all = clients.flatMap(linesOf);
  const retries = all.filter((l) => l.msg === 'retry');
  const met = new Map<string, number>();
  for (const r of retries) met.set(r.error ?? '', (met.get(r.error ?? '') ?? 0) + 1);
  const fiveXx = retries.filter((r) => /^5\d\d/.test(r.error ?? '')).length;
  const settled = all.filter((l) => l.msg === 'settled');
  const replays = intents.filter((i) => i.answer?.replayed === true).length;
  // How long the slowest intent waited from its first attempt to its answer.
  const firstAttempt = new Map<string, number>();
  for (const l of all) {
    if (l.msg === 'attempt' && l.attempt === 1) firstAttempt.set(l.key ?? '', l.at);
  }
  const waits = settled.map((l) => l.at - (firstAttempt.get(l.key ?? '') ?? l.at));
  const sortedWaits = [...waits].sort((a, b) => a - b);
  const median = sortedWaits[Math.floor(sortedWaits.length / 2)] ?? 0;
  return [
    `${String(intents.length)} intents in ${String(clients.length)} client processes (one outbox each), ` +
      `${String(all.filter((l) => l.msg === 'attempt').length)} attempts, ${String(retries.length)} retries ` +
      `(${String(intents.filter((i) => i.attempts > 1).length)} intents retried, at most ${String(Math.max(...intents.map((i) => i.attempts)))} attempts for one), ` +
      `${String(replays)} final answers were replays`,
    `5xx answers: ${String(fiveXx)}; what the retries met: ${JSON.stringify(Object.fromEntries(met))}`,
    `from first attempt to final answer: median ${String(median)} ms, longest ${String(Math.max(...waits))} ms`,
    ...failovers.map((f, n) => {
      const first = settled
        .filter(
          (l) =>
            l.status === 201 &&
            // Started once the old primary was gone: answered by the new one.
            (starts.get(`${l.key ?? ''}#${String(l.attempt ?? 0)}`) ?? 0) >= f.downAt,
        )
        .map((l) => l.at);
      const since = first.length === 0 ? 'never' : `${String(Math.min(...first) - f.stoppedAt)} ms`;
      return (
        `failover ${String(n + 1)}: old primary down ${String(f.downAt - f.stoppedAt)} ms after the stop, ` +
        `promoted at ${String(f.promotedAt - f.stoppedAt)} ms, forwarder switched at ${String(f.switchedAt - f.stoppedAt)} ms, ` +
        `first 201 on the new primary ${since} after the stop`
      );
    }),
  ];
}

void t.test('a failover under keyed transfers: every intent takes effect once', async (t) => {
  const setup = await setUp(t);
  const { pair, forwarder } = setup;
  const processes: ServerProcess[] = [];
  const clients: ClientProcess[] = [];
  const pools: Sql[] = [];
  const folder = await fs.mkdtemp(path.join(os.tmpdir(), 'app-test-failover-outboxes-'));
  const stopFile = path.join(folder, 'stop');
  t.teardown(async () => {
    await stopProcesses(clients.map((c) => c.process));
    await stopProcesses(processes);
    await Promise.all(pools.map((p) => p.end({ timeout: 1 }).catch(() => undefined)));
    await fs.rm(folder, { recursive: true, force: true });
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

  // The client processes: each states its transfers in its own outbox and
  // drains it through one of the two api processes.
  for (let c = 0; c < CLIENTS; c += 1) {
    const outbox = path.join(folder, `client-${String(c)}.sqlite`);
    const api = c % 2;
    const start = () =>
      startScriptProcess('test/reliability/failover-client.ts', [], {
        FAILOVER_CLIENT_OUTBOX: outbox,
        FAILOVER_CLIENT_BASE_URL: apis[api]?.base ?? '',
        FAILOVER_CLIENT_TOKEN: token,
        FAILOVER_CLIENT_ACCOUNTS: accounts.join(','),
        FAILOVER_CLIENT_TRANSFERS: String(TRANSFERS_PER_CLIENT),
        FAILOVER_CLIENT_STOP_FILE: stopFile,
        FAILOVER_CLIENT_INDEX: String(c),
        FAILOVER_CLIENT_DEADLINE_MS: String(DRAIN_DEADLINE_MS),
      });
    clients.push({ index: c, api, outbox, process: start(), killed: [], restart: start });
  }
  const settledSoFar = (): number =>
    clients.reduce((n, c) => n + linesOf(c).filter((l) => l.msg === 'settled').length, 0);

  /** The transfers stated at least; the clients state more until the stop file. */
  const total = CLIENTS * TRANSFERS_PER_CLIENT;
  const failovers: FailoverFigures[] = [];
  for (let f = 1; f <= FAILOVERS; f += 1) {
    const threshold = Math.floor((total * f) / (FAILOVERS + 1));
    await eventually(
      `${String(threshold)} intents settled`,
      () => {
        if (settledSoFar() >= threshold) return Promise.resolve(true);
        // Clients that all ended early would leave nothing to wait for.
        if (clients.every((c) => c.process.child.exitCode !== null)) {
          return Promise.reject(
            new Error(
              `the client processes ended early: ${clients.map((c) => c.process.stderr()).join('')}`,
            ),
          );
        }
        return Promise.resolve(false);
      },
      DRAIN_DEADLINE_MS,
    );
    const stoppedAt = Date.now();
    await pair.stopPrimary();
    const downAt = Date.now();
    // A client crashes with the database: SIGKILL while its requests fail,
    // then a new process on the same outbox drains what it left.
    const crashed = clients[(f - 1) % clients.length];
    if (crashed !== undefined && crashed.process.child.exitCode === null) {
      crashed.process.child.kill('SIGKILL');
      await crashed.process.exited;
      crashed.killed.push(crashed.process);
      crashed.process = crashed.restart();
    }
    await pair.promoteStandby();
    const promotedAt = Date.now();
    forwarder.switchTo(pair.primary().port);
    failovers.push({ stoppedAt, downAt, promotedAt, switchedAt: Date.now() });
    t.same(
      await consistencyProblems(pair),
      [],
      `failover ${String(f)}: the promoted node holds no key twice and its indexes match its tables`,
    );
    // The next failover needs a standby again: the old primary, rebuilt
    // from the new one under load.
    if (f < FAILOVERS) await pair.rebuildStandby();
  }
  // The load goes on until each api process has answered a 201 on the new
  // primary (asserted below), then the clients finish what they stated.
  const last = failovers[failovers.length - 1];
  const answeredAfter = (n: number): boolean => {
    const starts = attemptStarts(clients);
    return clients
      .filter((c) => c.api === n)
      .some((c) =>
        linesOf(c).some(
          (l) =>
            l.msg === 'settled' &&
            l.status === 201 &&
            last !== undefined &&
            (starts.get(`${l.key ?? ''}#${String(l.attempt ?? 0)}`) ?? 0) >= last.switchedAt,
        ),
      );
  };
  await eventually(
    'both api processes answer 201 on the new primary, or the clients end',
    () =>
      Promise.resolve(
        (answeredAfter(0) && answeredAfter(1)) ||
          clients.every((c) => c.process.child.exitCode !== null),
      ),
    60_000,
  ).catch(() => undefined);
  await fs.writeFile(stopFile, '');
  const exits = await Promise.all(clients.map((c) => c.process.exited));
  t.same(
    exits,
    clients.map(() => 0),
    `every client process drained its outbox and exited 0: ${clients.map((c) => c.process.stderr()).join('')}`,
  );
  t.equal(
    clients.filter((c) => c.killed.length > 0 && linesOf(c).some((l) => l.msg === 'resumed'))
      .length,
    Math.min(FAILOVERS, clients.length),
    'a client killed during each failover was started again on its outbox and resumed it',
  );
  // Each restart found work the killed process left, and finished it: its
  // resumed line counts pending intents, and every key the killed process
  // attempted without a final answer is settled 201 by a later process on
  // the same outbox.
  for (const c of clients) {
    const processes = [...c.killed, c.process];
    c.killed.forEach((killed, i) => {
      const later = processes.slice(i + 1).flatMap((p) => p.lines) as unknown as ClientLine[];
      const resumed = (processes[i + 1]?.lines as unknown as ClientLine[] | undefined)?.find(
        (l) => l.msg === 'resumed',
      );
      t.ok(
        (resumed?.pending ?? 0) >= 1,
        `client ${String(c.index)}: the restart resumed ${String(resumed?.pending)} pending intents`,
      );
      const own = killed.lines as unknown as ClientLine[];
      const settled = new Set(own.filter((l) => l.msg === 'settled').map((l) => l.key));
      const left = new Set(
        own.filter((l) => l.msg === 'attempt' && !settled.has(l.key)).map((l) => l.key),
      );
      const finished = new Set(
        later.filter((l) => l.msg === 'settled' && l.status === 201).map((l) => l.key),
      );
      t.same(
        [...left].filter((key) => !finished.has(key)),
        [],
        `client ${String(c.index)}: the ${String(left.size)} intents its killed process left in flight were settled 201 after the restart`,
      );
    });
  }
  // A client that could not drain means the database stayed out of reach:
  // the checks below would wait on it. The outboxes still say what is left.
  const drained = exits.every((code) => code === 0);

  // The outboxes, read back after their processes ended.
  const intents: Intent[] = [];
  const intentsBy = new Map<number, Intent[]>();
  for (const c of clients) {
    const outbox = Outbox.open(c.outbox);
    try {
      const listed = outbox.list();
      intents.push(...listed);
      intentsBy.set(c.index, listed);
    } finally {
      outbox.close();
    }
  }
  for (const line of describe(clients, intents, failovers)) t.comment(line);
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

  const stated = clients.reduce(
    (n, c) => n + linesOf(c).reduce((m, l) => m + (l.msg === 'stated' ? (l.transfers ?? 0) : 0), 0),
    0,
  );
  t.ok(
    stated >= total,
    `the clients stated ${String(stated)} transfers, at least ${String(total)}`,
  );
  t.equal(intents.length, stated, 'the outboxes hold every intent stated');
  t.same(
    intents.filter((i) => i.state !== 'done').map((i) => [i.key, i.state, i.lastError]),
    [],
    'every intent in every outbox has a final answer',
  );
  t.same(
    intents.filter((i) => i.answer?.status !== 201).map((i) => [i.key, i.answer]),
    [],
    'every final answer is a 201',
  );
  t.equal(failovers.length, FAILOVERS, 'every failover happened');
  const starts = attemptStarts(clients);
  const all = clients.flatMap(linesOf);
  t.same(
    failovers
      .map((f, n) => ({ n: n + 1, f }))
      .filter(
        ({ f }) =>
          !all.some(
            (l) =>
              l.msg === 'retry' &&
              l.at >= f.stoppedAt &&
              (starts.get(`${l.key ?? ''}#${String(l.attempt ?? 0)}`) ?? Infinity) < f.switchedAt,
          ),
      )
      .map(({ n }) => n),
    [],
    'each failover hit requests in flight: some failed and were retried with their keys',
  );
  for (const [n, api] of apis.entries()) {
    t.ok(
      answeredAfter(n),
      `api process ${String(n + 1)} answered 201 on the new primary without a restart`,
    );
    t.equal(api.process.child.exitCode, null, `api process ${String(n + 1)} is still running`);
  }
  t.same(
    processes.map((p) => p.child.pid),
    pids,
    'the server processes are the ones started',
  );

  if (!drained) return;

  const owner = createSql(setup.ownerUrl, { max: 2, applicationName: 'test-owner' });
  pools.push(owner);
  const [where] = await owner<{ port: number; recovery: boolean }[]>`
    select current_setting('port')::int as port, pg_is_in_recovery() as recovery`;
  t.same(where, { port: pair.primary().port, recovery: false }, 'the checks read the new primary');

  const createdIds = intents
    .filter((i) => i.answer?.status === 201)
    .map((i) => (JSON.parse(i.answer?.body ?? '{}') as { id: string }).id)
    .sort();
  const transfers = await owner<{ id: string }[]>`select id from ledger_transfers order by id`;
  t.equal(new Set(createdIds).size, createdIds.length, 'every 201 names a transfer of its own');
  t.same(
    transfers.map((r) => r.id),
    createdIds,
    'every 201 transfer exists exactly once, and no transfer exists that no intent asked for',
  );
  const keyRows = await owner<{ key: string; resource_id: string | null }[]>`
    select key, resource_id from idempotency_keys where action = 'createTransfer'`;
  const byKey = new Map(keyRows.map((r) => [r.key, r.resource_id]));
  t.equal(keyRows.length, intents.length, 'one key row per intent');
  t.same(
    intents
      .filter(
        (i) => byKey.get(i.key) !== (JSON.parse(i.answer?.body ?? '{}') as { id?: string }).id,
      )
      .map((i) => i.key),
    [],
    "each intent's key row names the transfer its outbox recorded",
  );
  const known = new Set(createdIds);
  const extra = transfers.filter((r) => !known.has(r.id)).map((r) => r.id);
  if (extra.length > 0 || keyRows.length !== intents.length) {
    // What the database holds beyond the answers, for the report.
    const keysInOutboxes = new Set(intents.map((i) => i.key));
    const [counts] = await owner<{ rows: string; keys: string }[]>`
      select count(*)::text as rows, count(distinct (principal_id, key))::text as keys
        from idempotency_keys where action = 'createTransfer'`;
    const rows = await owner<Record<string, unknown>[]>`
      select x.id::text as transfer, k.key::text as key, k.state, k.response_status,
             k.created_at::text as key_created, x.created_at::text as transfer_created
        from ledger_transfers x left join idempotency_keys k on k.resource_id = x.id
       where x.id = any(${extra}::uuid[])`;
    t.comment(`key rows ${counts?.rows ?? '?'}, distinct keys ${counts?.keys ?? '?'}`);
    for (const r of rows) {
      t.comment(
        `extra transfer ${JSON.stringify(r)}; key in an outbox: ${String(keysInOutboxes.has(String(r['key'])))}`,
      );
    }
    const mismatched = intents.filter(
      (i) => byKey.get(i.key) !== (JSON.parse(i.answer?.body ?? '{}') as { id?: string }).id,
    );
    for (const i of mismatched.slice(0, 3)) {
      t.comment(
        `intent ${i.key}: key row names ${String(byKey.get(i.key))}, outbox answer ${i.answer?.body.slice(0, 120) ?? ''} replayed ${String(i.answer?.replayed)}`,
      );
    }
    // Kept for reading: the outboxes, every line of every process, and both
    // data folders (the primary stopped as a crash would, so the folders are
    // whole; the other node's is the old primary's, as it stopped). The
    // checks below would only add noise to a run that has failed already.
    const kept = await fs.mkdtemp(path.join(os.tmpdir(), 'app-failover-anomaly-'));
    await fs.cp(folder, path.join(kept, 'outboxes'), { recursive: true });
    const jsonl = (lines: readonly unknown[]): string =>
      lines.map((l) => JSON.stringify(l)).join('\n');
    for (const c of clients) {
      await fs.writeFile(path.join(kept, `client-${String(c.index)}.jsonl`), jsonl(linesOf(c)));
    }
    for (const [n, p] of processes.entries()) {
      await fs.writeFile(path.join(kept, `server-${String(n)}.jsonl`), jsonl(p.lines));
    }
    await stopProcesses(processes);
    await owner.end({ timeout: 1 });
    await pair.stopPrimary();
    const [nodeA] = pair.nodes;
    await fs.cp(path.dirname(nodeA.rootDir), path.join(kept, 'clusters'), { recursive: true });
    t.comment(`kept for reading: ${kept}`);
    return;
  }
  t.same(await keysInProgress(owner), [], 'no key row is left in progress');
  await assertLedgerInvariants(t, owner, openings);

  await workerRunsAJob(owner);
  t.equal(
    worker.child.exitCode,
    null,
    'the worker ran a job on the new primary and is still running',
  );

  t.same(await stopProcesses(processes), [0, 0, 0], 'every server process drains and exits 0');
});

/**
 * A URL of the pair's superuser over a host list on 127.0.0.1 that asks
 * for read-write, the hosts in the order given.
 */
function readWriteList(pair: ReplicatedPair, ports: readonly number[]): string {
  const [first] = pair.nodes;
  const credentials = new URL(pair.adminUrl(first));
  const hosts = ports.map((port) => `127.0.0.1:${String(port)}`).join(',');
  return `postgres://${credentials.username}:${credentials.password}@${hosts}/postgres?target_session_attrs=read-write`;
}

void t.test(
  "the api's pool with both hosts and target_session_attrs finds the promoted standby",
  async (t) => {
    // What the api processes would do without the forwarder: postgres.js
    // takes a host list and connects only to the node that accepts writes.
    // The api role accepts such a database.url (the worker role does not:
    // node-postgres takes one host); this drives the api's pool factory
    // directly, on the same two clusters and the same failover.
    const pair = await startReplicatedPair();
    t.teardown(() => pair.close());
    const [a, b] = pair.nodes;
    const url = readWriteList(pair, [a.port, b.port]);
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

void t.test(
  'a host list that names the standby first still gives read-write connections only on the primary',
  async (t) => {
    // postgres.js 3.4.9 judges read-write by default_transaction_read_only
    // alone, which a hot standby reports off: each connection starts at the
    // first host of the list, so a list whose first node is a standby (the
    // old primary rebuilt as one, after a failover) would put every
    // connection of the pool on it, and every write would fail 25006.
    const pair = await startReplicatedPair();
    t.teardown(() => pair.close());
    const [a, b] = pair.nodes;
    const url = readWriteList(pair, [b.port, a.port]);
    const sql = createSql(url, { max: 3, applicationName: 'test-standby-first' });
    t.teardown(() => sql.end({ timeout: 1 }).catch(() => undefined));
    const sessions = await Promise.all(
      [1, 2, 3].map(async () =>
        sql.begin(
          async (tx) =>
            (
              await tx<{ port: number; recovery: boolean }[]>`
                select current_setting('port')::int as port, pg_is_in_recovery() as recovery,
                       pg_sleep(0.2)`
            ).map(({ port, recovery }) => ({ port, recovery }))[0],
        ),
      ),
    );
    t.same(
      sessions,
      [1, 2, 3].map(() => ({ port: a.port, recovery: false })),
      'every connection of the pool is on the primary, none on the standby listed first',
    );
    await sql`create table standby_first_probe (n int primary key)`;
    await sql`insert into standby_first_probe values (1)`;
    t.same(
      (await sql<{ n: number }[]>`select n from standby_first_probe`).map((r) => r.n),
      [1],
      'a write through the pool lands',
    );
  },
);

void t.test(
  'a host list with no primary paces its tries, then reaches the standby once it is promoted',
  async (t) => {
    // The primary is gone and the standby not yet promoted: the driver,
    // asked for the primary, ends every session the standby opens and
    // opens the next at once while a statement waits.
    const pair = await startReplicatedPair();
    t.teardown(() => pair.close());
    const [a, b] = pair.nodes;
    await pair.stopPrimary();
    // Start-ups the pool sends to the standby, counted on the way: each
    // session opens with a StartupMessage (its length, then protocol 3.0).
    let startups = 0;
    const relay = await startForwarder(b.port, {
      onClientData: (chunk) => {
        if (chunk.length >= 8 && chunk.readInt32BE(4) === 196_608) startups += 1;
      },
    });
    t.teardown(() => relay.close());
    const url = readWriteList(pair, [a.port, relay.port]);
    const sql = createSql(url, {
      max: 2,
      applicationName: 'test-no-primary',
      connectTimeoutMs: 2000,
    });
    t.teardown(() => sql.end({ timeout: 1 }).catch(() => undefined));
    // A postgres.js statement starts when awaited or executed.
    const waiting = sql<{ recovery: boolean }[]>`select pg_is_in_recovery() as recovery`.execute();
    await sleep(3000);
    const tried = startups;
    t.ok(tried <= 30, `sessions the pool started on the standby in 3 s: ${String(tried)}, paced`);
    t.ok(tried >= 1, 'the pool did try the standby');
    await pair.promoteStandby();
    t.same(
      (await waiting).map((r) => r.recovery),
      [false],
      'the statement that waited runs on the promoted node',
    );
  },
);
