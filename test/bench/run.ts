/**
 * `make bench`: the benchmark suite. Starts a durable embedded PostgreSQL 18
 * of its own (fsync and synchronous commit on), migrates it, starts the real
 * server (`serve --role api`) as a separate process on 127.0.0.1 and drives
 * the ledger transfer route with autocannon from this process:
 *
 * - steady scenarios, measured in interleaved rounds of one window each
 *   (rounds.ts), so every ratio's two sides meet the same minutes: the
 *   physical limit (the same transfer as one raw postgres.js statement in
 *   an implicit transaction, unkeyed and with its completed key row,
 *   limit.ts); the key's cost piece by piece as raw statements
 *   (shape.ts); the in-process ceiling (the same transfer use case, unkeyed
 *   and keyed, called by concurrent callers in this process with no HTTP,
 *   ceiling.ts); unkeyed transfers (the baseline: same route, same
 *   transaction); keyed transfers, a fresh key per request; both over
 *   1,000 principals; authenticated reads of a transfer (`GET
 *   /api/v1/transfers/{id}`) and replays of completed keys; the peer
 *   library in place of ours (test/bench/peer-server.ts, a server of its
 *   own on the same database); the HTTP floor, a bare Fastify server
 *   answering the same requests with no database (floor-server.ts);
 *   unkeyed and keyed transfers to a second server of ours with tracing
 *   on, every request sampled and exported to a collector process
 *   (otlp-sink.ts);
 * - then, one after the other: bursts of identical keyed requests (time
 *   until all answered, effects); keyed transfers with 1,000,000 keys
 *   stored (seeded with SQL); cleanup of 1,000,000 expired keys, alone,
 *   against a bare batched DELETE, and under keyed load; the built command
 *   line's `client transfer`, against `node -e 0` plus its HTTP exchanges,
 *   and its exit after its last write (client.ts).
 *
 * Prints a table, writes `.bench-results/<time>.json` and
 * `.bench-results/chart.svg`; with `--publish` also copies both to
 * docs/performance/. Options: `--seconds N` (measured window, default 15),
 * `--warmup N` (default 5), `--runs N` (measured windows per scenario, the
 * median kept, one window per round; default 3), `--connections N`
 * (default 16), `--keys N`
 * (seeded keys, default 1000000), `--bursts N` (default 50), `--only
 * unkeyed,keyed` (run only these load scenarios; no targets are judged),
 * `--cpu-prof` (the servers write V8 CPU profiles to .bench-results/profiles),
 * `--client-runs N` (runs of the client scenario, default 20).
 * Every scenario also reports its writes to PostgreSQL per request.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { systemClock } from '../../kernel/clock/index.js';
import { newId } from '../../kernel/ids/index.js';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import {
  createIdentityModule,
  createPrincipalWithToken,
  startCredentialListener,
} from '../../modules/identity/index.js';
import { createLedgerModule } from '../../modules/ledger/index.js';
import { createSyncModule } from '../../modules/sync/index.js';
import { loadConfig } from '../../platform/config/index.js';
import { projectRoot, runMigrations } from '../../platform/migrate/index.js';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { openDatabase } from '../../platform/pg/database.js';
import { freePort } from '../../platform/pg/embedded.js';
import {
  PgDatabase,
  PgUnitOfWork,
  STALL_GRACE_MS,
  unitOfWorkSettings,
} from '../../platform/pg/uow.js';
import { runCeiling } from './ceiling.js';
import { builtClient, runClient } from './client.js';
import { runLimit } from './limit.js';
import { medianWindow, runInterleaved, type SteadyScenario } from './rounds.js';
import { runShape, SHAPES, type Shape } from './shape.js';
import { burst, measure, type LoadFigures, type LoadRequest } from './load.js';
import { postmasterPid } from './proc.js';
import {
  floorHoldMs,
  formatClient,
  formatFloorBound,
  formatReport,
  formatScenarios,
  formatTracingCost,
  judgeTargets,
  renderChart,
  type BenchFigures,
  type ClientFigures,
  type ScenarioFigures,
} from './report.js';

const { values: cli } = parseArgs({
  options: {
    seconds: { type: 'string', default: '15' },
    warmup: { type: 'string', default: '5' },
    connections: { type: 'string', default: '16' },
    keys: { type: 'string', default: '1000000' },
    bursts: { type: 'string', default: '50' },
    runs: { type: 'string', default: '3' },
    'client-runs': { type: 'string', default: '20' },
    publish: { type: 'boolean', default: false },
    only: { type: 'string', default: '' },
    'cpu-prof': { type: 'boolean', default: false },
  },
});

function positive(name: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) {
    throw new Error(`--${name} must be a positive integer, got "${text}"`);
  }
  return n;
}

const SECONDS = positive('seconds', cli.seconds);
const WARMUP = positive('warmup', cli.warmup);
const CONNECTIONS = positive('connections', cli.connections);
const SEEDED_KEYS = positive('keys', cli.keys);
const BURSTS = positive('bursts', cli.bursts);
const RUNS = positive('runs', cli.runs);
const CLIENT_RUNS = positive('client-runs', cli['client-runs']);
const ONLY = new Set(cli.only.split(',').filter((x) => x !== ''));
/** The runtime package.json pins (nodeRuntime.version): every figure says whether it ran on it. */
const PINNED_NODE = (
  JSON.parse(await fs.readFile(path.join(projectRoot(), 'package.json'), 'utf8')) as {
    nodeRuntime: { version: string };
  }
).nodeRuntime.version;
if (process.version !== `v${PINNED_NODE}`) {
  log(`warning: running on Node.js ${process.version}, not the pinned v${PINNED_NODE}`);
}
const wanted = (id: string): boolean => ONLY.size === 0 || ONLY.has(id);
/** The realistic spread's principals and their accounts (10 each). */
const SPREAD_PRINCIPALS = 1_000;
const SPREAD_ACCOUNTS = 10_000;
const BURST_SIZE = 64;
/** The key shape scenarios' lines (shape.ts). */
const SHAPE_LABELS: Record<Shape, string> = {
  unkeyed: 'unkeyed, raw statements',
  row: '+ completed key row in the first write',
  update: '+ row in progress, completed with the COMMIT',
  savepoint: '+ savepoint after the insert',
  round_trip: '+ transfer after the insert is answered',
  advisory: 'another shape: advisory lock and read first, completed row with the COMMIT',
};
/** The longest window measured while the cleanup runs. */
const DURING_CAP_SECONDS = 600;
const ACCOUNTS = 256;
const OPENING = 1_000_000_000_000;
const REPLAY_KEYS = 2_000;
const TRANSFERS = '/api/v1/transfers';

function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

interface Server {
  readonly child: ChildProcess;
  readonly base: string;
}

async function startServer(script: string, args: string[], env: Record<string, string>) {
  const port = await freePort();
  const profile = cli['cpu-prof']
    ? ['--cpu-prof', `--cpu-prof-dir=${path.join(projectRoot(), '.bench-results', 'profiles')}`]
    : [];
  // The built JavaScript, as `make run` serves it (make bench builds first).
  const built = path.join(projectRoot(), script);
  await fs.access(built).catch(() => {
    throw new Error(`${script} is missing: run the bench through make bench, which builds it`);
  });
  const child = spawn(process.execPath, [...profile, built, ...args], {
    cwd: projectRoot(),
    env: {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: process.env['HOME'] ?? '/tmp',
      HTTP__PORT: String(port),
      HTTP__RATE_LIMIT_MAX: '1000000000',
      LOG__LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const base = `http://127.0.0.1:${String(port)}`;
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null) throw new Error(`${script} exited with ${String(child.exitCode)}`);
    try {
      if ((await fetch(`${base}/readyz`)).status === 200) return { child, base } as Server;
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${script} did not become ready`);
}

async function stopServer(server: Server): Promise<void> {
  const exited = new Promise((r) => server.child.once('exit', r));
  server.child.kill('SIGTERM');
  await exited;
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
}

function transferBody(accounts: readonly string[]): string {
  const from = pick(accounts);
  let to = pick(accounts);
  while (to === from) to = pick(accounts);
  return JSON.stringify({ from_account_id: from, to_account_id: to, amount: 1 });
}

function toScenario(id: string, label: string, f: LoadFigures): ScenarioFigures {
  log(
    `${label}: ${f.rps.toFixed(0)} req/s, p99 ${f.p99Ms.toFixed(1)} ms, statuses ${JSON.stringify(f.statuses)}`,
  );
  return {
    id,
    label,
    rps: f.rps,
    p50Ms: f.p50Ms,
    p99Ms: f.p99Ms,
    requests: f.requests,
    non2xx: f.non2xx,
    errors: f.errors,
    nodeCpuUs: f.nodeCpuUsPerRequest,
    pgCpuUs: f.pgCpuUsPerRequest,
    pgWrites: f.pgWritesPerRequest,
    loadCpuUs: f.loadCpuUsPerRequest,
  };
}

async function seedKeys(
  owner: Sql,
  admin: Sql,
  principalId: string,
  count: number,
  expired: boolean,
) {
  const started = performance.now();
  const answer = {
    id: newId(),
    from_account_id: newId(),
    to_account_id: newId(),
    amount: 1,
    created_at: new Date().toISOString(),
  };
  // In slices, so no single statement holds a huge transaction.
  const slice = 100_000;
  for (let done = 0; done < count; done += slice) {
    const n = Math.min(slice, count - done);
    await owner`
      insert into idempotency_keys
             (principal_id, key, action, request_sha256, state, response_status,
              response_body, resource_id, created_at, expires_at)
      select ${principalId}, uuidv7(), 'createTransfer', sha256(i::text::bytea), 'completed', 201,
             ${owner.json(answer)}, uuidv7(), now() - interval '25 hours',
             now() + ${expired ? '-1 hour' : '24 hours'}::interval
        from generate_series(1, ${n}) i`;
  }
  await owner`vacuum analyze idempotency_keys`;
  // The seeding's dirty pages and WAL are flushed now, not in the window.
  await admin`checkpoint`;
  log(
    `seeded ${String(count)} ${expired ? 'expired' : 'live'} keys in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
}

/** A run of a subset: its load scenarios, if any, and the client's line when it ran. */
function partial(figures: BenchFigures): string {
  const parts = [
    figures.scenarios.length === 0 ? '' : formatScenarios(figures),
    formatFloorBound(figures),
    formatTracingCost(figures),
    formatClient(figures.client),
  ];
  return `${parts.filter((p) => p !== '').join('\n\n')}\n`;
}

async function main(): Promise<void> {
  const rootDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-pg-'));
  log(`durable embedded PostgreSQL 18 in ${rootDir}`);
  const target = await openDatabase({
    url: '',
    owner_url: '',
    embedded_data_dir: rootDir,
    embedded_port: 0,
  });
  const servers: Server[] = [];
  try {
    const ownerUrl = target.ownerUrl!;
    await runMigrations({ ownerUrl, appRole: target.appRole });
    const owner = createSql(ownerUrl, { max: 2, applicationName: 'bench-owner' });
    const admin = createSql(target.embedded!.adminUrl('app'), {
      max: 1,
      applicationName: 'bench-admin',
    });
    const appSql = createSql(target.appUrl, { max: 4, applicationName: 'bench-cleanup' });
    const pgPid = postmasterPid(path.join(rootDir, 'data'));
    const settings = await owner<{ name: string; setting: string }[]>`
      select name, setting from pg_settings
       where name in ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'server_version')`;
    log(`PostgreSQL settings: ${settings.map((s) => `${s.name}=${s.setting}`).join(', ')}`);

    const db = new PgDatabase(appSql);
    const uow = new PgUnitOfWork(db, {
      lockTimeoutMs: 5_000,
      statementTimeoutMs: 600_000,
      transactionTimeoutMs: 600_000,
      retryMax: 3,
    });
    const { principalId, token } = await createPrincipalWithToken(
      { db, uow, clock: systemClock },
      { displayName: 'Benchmark' },
    );
    const accounts = (
      await owner<{ id: string }[]>`
        insert into ledger_accounts
               (id, principal_id, name, opening_balance, balance, version, created_at, updated_at)
        select uuidv7(), ${principalId}, 'bench ' || i, ${OPENING}, ${OPENING}, 1, now(), now()
          from generate_series(1, ${ACCOUNTS}) i
        returning id`
    ).map((r) => r.id);
    await owner`vacuum analyze`;

    const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    const config = loadConfig({ env: { DATABASE__URL: target.appUrl } });
    const scenarios: ScenarioFigures[] = [];
    // The steady scenarios, measured in interleaved rounds (rounds.ts); what
    // each needs stays open until the rounds end.
    const steady: SteadyScenario[] = [];
    const closers: (() => Promise<unknown>)[] = [];
    const env = { DATABASE__URL: target.appUrl };
    const ours = await startServer('dist/apps/server/main.js', ['--role', 'api'], env);
    servers.push(ours);
    const serverPid = ours.child.pid!;
    /** One window of HTTP load against a server. */
    const httpWindow =
      (next: () => LoadRequest, server: Server, pid: number, rate?: () => number | undefined) =>
      (seconds: number) => {
        const overallRate = rate?.();
        return measure({
          url: server.base,
          path: TRANSFERS,
          connections: CONNECTIONS,
          seconds,
          next,
          serverPid: pid,
          postmasterPid: pgPid,
          ...(overallRate === undefined ? {} : { overallRate }),
        });
      };

    // The physical limit: the same transfer as one raw statement, same pool
    // size and callers as the ceiling (test/bench/limit.ts).
    if (wanted('limit')) {
      const limitSql = createSql(target.appUrl, {
        max: config.database.pool_max,
        applicationName: 'bench-limit',
      });
      closers.push(() => limitSql.end());
      for (const [id, label, keyedLimit] of [
        ['limit_unkeyed', 'physical limit, unkeyed', false],
        ['limit_keyed', 'physical limit, completed key row in the statement', true],
      ] as const) {
        const base = {
          sql: limitSql,
          principalId,
          nextBody: () => transferBody(accounts),
          concurrency: CONNECTIONS,
          keyed: keyedLimit,
          ttlMs: config.sync.idempotency_key_ttl,
          postmasterPid: pgPid,
        };
        steady.push({ id, label, window: (seconds) => runLimit({ ...base, seconds }) });
      }
    }

    // The key's cost piece by piece (shape.ts): raw statements on a
    // reserved connection, the same pool size and callers as the limit.
    if (SHAPES.some((shape) => wanted(`shape_${shape}`)) || wanted('shape')) {
      const shapeSql = createSql(target.appUrl, {
        max: config.database.pool_max,
        applicationName: 'bench-shape',
      });
      closers.push(() => shapeSql.end());
      for (const shape of SHAPES) {
        if (!wanted('shape') && !wanted(`shape_${shape}`)) continue;
        const base = {
          sql: shapeSql,
          principalId,
          accounts,
          shape,
          concurrency: CONNECTIONS,
          ttlMs: config.sync.idempotency_key_ttl,
          postmasterPid: pgPid,
        };
        steady.push({
          id: `shape_${shape}`,
          label: `key shape: ${SHAPE_LABELS[shape]}`,
          window: (seconds) => runShape({ ...base, seconds }),
        });
      }
    }

    // The in-process ceiling: the same use case, unit of work, pool size
    // and database as the server, no HTTP.
    if (wanted('ceiling')) {
      const ceilingSql = createSql(target.appUrl, {
        max: config.database.pool_max,
        applicationName: 'bench-ceiling',
        // As the server makes its pool (apps/server/app.ts).
        connectTimeoutMs: config.database.connect_timeout,
        session: unitOfWorkSettings(config.database),
      });
      const ceilingDb = new PgDatabase(ceilingSql, {
        statementDeadlineMs:
          config.database.statement_timeout === 0
            ? 0
            : config.database.statement_timeout + config.database.connect_timeout + STALL_GRACE_MS,
      });
      await ceilingDb.confirmSessionTimeouts();
      const ceilingUow = new PgUnitOfWork(ceilingDb, unitOfWorkSettings(config.database));
      const deps = { db: ceilingDb, uow: ceilingUow, clock: systemClock };
      // The token cache and its listener, as the server has them.
      const identity = createIdentityModule({
        ...deps,
        tokenCache: {
          ttlMs: config.identity.token_cache_ttl,
          maxEntries: config.identity.token_cache_size,
        },
      });
      const credentials =
        config.identity.token_cache_ttl === 0
          ? undefined
          : await startCredentialListener(target.appUrl, identity.credentialFeed, {
              applicationName: 'bench-ceiling-credentials',
            });
      closers.push(async () => {
        await credentials?.close();
        await ceilingSql.end();
      });
      const base = {
        uow: ceilingUow,
        authenticator: identity.authenticator,
        ledger: createLedgerModule(deps).service,
        store: createSyncModule({
          ...deps,
          metrics: new InMemoryMetrics(),
          cleanupBatchSize: config.sync.idempotency_cleanup_batch_size,
          cleanupPacing: config.sync.idempotency_cleanup_pacing,
          cleanupIntervalMs: config.sync.idempotency_cleanup_interval,
        }).store,
        token,
        nextBody: () => transferBody(accounts),
        concurrency: CONNECTIONS,
        ttlMs: config.sync.idempotency_key_ttl,
        postmasterPid: pgPid,
      };
      for (const [id, label, keyed] of [
        ['ceiling_unkeyed', 'in-process ceiling, unkeyed', false],
        ['ceiling_keyed', 'in-process ceiling, keyed', true],
      ] as const) {
        steady.push({ id, label, window: (seconds) => runCeiling({ ...base, keyed, seconds }) });
      }
    }

    const unkeyed = (): LoadRequest => ({ headers: auth, body: transferBody(accounts) });
    const keyed = (): LoadRequest => ({
      headers: { ...auth, 'idempotency-key': newId() },
      body: transferBody(accounts),
    });
    // The unkeyed baseline's latest rate: the HTTP floor runs at it, since
    // CPU per request falls as the rate rises (more work per wakeup).
    let unkeyedRate: number | undefined;
    if (wanted('unkeyed')) {
      const baseline = httpWindow(unkeyed, ours, serverPid);
      steady.push({
        id: 'unkeyed',
        label: 'unkeyed (baseline)',
        window: async (seconds) => {
          const figures = await baseline(seconds);
          unkeyedRate = Math.max(1, Math.round(figures.rps));
          return figures;
        },
      });
    }
    if (wanted('keyed')) {
      steady.push({
        id: 'keyed',
        label: 'keyed, fresh key',
        window: httpWindow(keyed, ours, serverPid),
      });
    }

    // The realistic spread: 1,000 principals of 10 accounts each, every
    // request one principal's transfer between two of its own accounts
    // (the single principal over few accounts above is the worst case).
    if (wanted('spread_unkeyed') || wanted('spread_keyed')) {
      const started = performance.now();
      const spread: { headers: Record<string, string>; accounts: string[] }[] = [];
      for (let i = 0; i < SPREAD_PRINCIPALS; i++) {
        const made = await createPrincipalWithToken(
          { db, uow, clock: systemClock },
          { displayName: `Benchmark ${String(i)}` },
        );
        const own = (
          await owner<{ id: string }[]>`
            insert into ledger_accounts
                   (id, principal_id, name, opening_balance, balance, version, created_at, updated_at)
            select uuidv7(), ${made.principalId}, 'spread ' || n, ${OPENING}, ${OPENING}, 1, now(), now()
              from generate_series(1, ${SPREAD_ACCOUNTS / SPREAD_PRINCIPALS}) n
            returning id`
        ).map((r) => r.id);
        spread.push({
          headers: { authorization: `Bearer ${made.token}`, 'content-type': 'application/json' },
          accounts: own,
        });
      }
      await owner`vacuum analyze`;
      log(
        `spread: ${String(SPREAD_PRINCIPALS)} principals, ${String(SPREAD_ACCOUNTS)} accounts in ${((performance.now() - started) / 1000).toFixed(1)} s`,
      );
      const spreadRequest = (withKey: boolean) => (): LoadRequest => {
        const p = pick(spread);
        return {
          headers: withKey ? { ...p.headers, 'idempotency-key': newId() } : p.headers,
          body: transferBody(p.accounts),
        };
      };
      if (wanted('spread_unkeyed')) {
        steady.push({
          id: 'spread_unkeyed',
          label: `unkeyed, ${String(SPREAD_PRINCIPALS)} principals`,
          window: httpWindow(spreadRequest(false), ours, serverPid),
        });
      }
      if (wanted('spread_keyed')) {
        steady.push({
          id: 'spread_keyed',
          label: `keyed, ${String(SPREAD_PRINCIPALS)} principals`,
          window: httpWindow(spreadRequest(true), ours, serverPid),
        });
      }
    }

    // Replays: completed keys made through the API, then replayed at random;
    // beside them, authenticated reads of the same transfers.
    const replayable: LoadRequest[] = [];
    const reads: LoadRequest[] = [];
    const sideBySide = wanted('replay') || wanted('read');
    for (let i = 0; sideBySide && i < REPLAY_KEYS; i += CONNECTIONS) {
      const made = await Promise.all(
        Array.from({ length: CONNECTIONS }, async () => {
          const r = keyed();
          const res = await fetch(`${ours.base}${TRANSFERS}`, {
            method: 'POST',
            headers: r.headers,
            ...(r.body === undefined ? {} : { body: r.body }),
          });
          const created = (await res.json()) as { id: string };
          if (res.status !== 201) throw new Error(`replay set-up: ${String(res.status)}`);
          return { replay: r, id: created.id };
        }),
      );
      replayable.push(...made.map((m) => m.replay));
      reads.push(
        ...made.map((m): LoadRequest => ({
          method: 'GET',
          path: `${TRANSFERS}/${m.id}`,
          headers: { authorization: `Bearer ${token}` },
        })),
      );
    }
    if (wanted('read')) {
      steady.push({
        id: 'read',
        label: 'authenticated read of a transfer',
        window: httpWindow(() => pick(reads), ours, serverPid),
      });
    }
    if (wanted('replay')) {
      const replayWindow = httpWindow(() => pick(replayable), ours, serverPid);
      steady.push({
        id: 'replay',
        label: 'replay of a completed key',
        // The rounds put minutes between this scenario's windows, longer
        // than the replay cache keeps an entry (60 s by default): each
        // window first repeats every key once, unmeasured, so it measures
        // replays from memory, as a repeat soon after its first answer is.
        window: async (seconds) => {
          for (let i = 0; i < replayable.length; i += CONNECTIONS) {
            await Promise.all(
              replayable.slice(i, i + CONNECTIONS).map(async (r) => {
                const res = await fetch(`${ours.base}${TRANSFERS}`, {
                  method: 'POST',
                  headers: r.headers,
                  ...(r.body === undefined ? {} : { body: r.body }),
                });
                await res.arrayBuffer();
              }),
            );
          }
          return replayWindow(seconds);
        },
      });
    }

    // The peer library in place of ours, a server of its own on the same
    // database, idle while the others are measured.
    if (wanted('peer')) {
      const peer = await startServer('dist-bench/test/bench/peer-server.js', [], env);
      servers.push(peer);
      steady.push({
        id: 'peer',
        label: 'peer library, keyed, in memory',
        window: httpWindow(keyed, peer, peer.child.pid!),
      });
    }

    // The HTTP floor: bare Fastify, no database, the same load generator
    // and requests as the unkeyed baseline, at its rate when it runs
    // (floor-server.ts).
    // The plain floor's latest median latency: the held floor's hold is
    // the baseline's time in flight less it.
    let floorMs = 0;
    if (wanted('http_floor')) {
      const floor = await startServer('dist-bench/test/bench/floor-server.js', [], {});
      servers.push(floor);
      const window = httpWindow(unkeyed, floor, floor.child.pid!, () => unkeyedRate);
      steady.push({
        id: 'http_floor',
        label: 'HTTP floor: bare Fastify, fixed 201, no database, at the baseline rate',
        window: async (seconds) => {
          const figures = await window(seconds);
          floorMs = figures.p50Ms;
          return figures;
        },
      });
    }
    // The same floor with each answer held for the baseline's mean time in
    // flight (report.ts floorHoldMs): bare Fastify at the baseline's
    // latency, in a process of its own.
    if (wanted('http_floor_held')) {
      // Without the baseline there is no latency to hold for: the row would
      // be the plain floor under another name.
      if (!wanted('unkeyed')) throw new Error('http_floor_held needs the unkeyed scenario');
      const held = await startServer('dist-bench/test/bench/floor-server.js', [], {});
      servers.push(held);
      const window = httpWindow(unkeyed, held, held.child.pid!, () => unkeyedRate);
      steady.push({
        id: 'http_floor_held',
        label:
          "HTTP floor held for the baseline's mean latency, paced at most at the baseline rate",
        window: async (seconds) => {
          const ms = floorHoldMs(CONNECTIONS, unkeyedRate ?? 0, floorMs).toFixed(3);
          const answer = await fetch(`${held.base}/hold/${ms}`, { method: 'PUT' });
          if (answer.status !== 204)
            throw new Error(`the held floor refused hold ${ms}: ${answer.status}`);
          return window(seconds);
        },
      });
    }

    // Tracing on: a second server of ours with every request sampled,
    // exporting OTLP/HTTP JSON to a collector process of its own
    // (otlp-sink.ts), idle while the others are measured. Beside
    // `unkeyed` and `keyed` in the same rounds, its windows give what
    // tracing costs per request; the requests sent to it (warm-ups
    // included) against the request spans the collector received say
    // whether the SDK dropped any.
    let traced: { server: Server; sink: Server; sent: number } | undefined;
    let delivered: BenchFigures['tracing'];
    if (wanted('traced_unkeyed') || wanted('traced_keyed')) {
      const sink = await startServer('dist-bench/test/bench/otlp-sink.js', [], {});
      servers.push(sink);
      const server = await startServer('dist/apps/server/main.js', ['--role', 'api'], {
        ...env,
        TRACING__ENABLED: 'true',
        TRACING__ENDPOINT: `${sink.base}/v1/traces`,
        TRACING__SAMPLING_RATIO: '1',
      });
      servers.push(server);
      const on = { server, sink, sent: 0 };
      traced = on;
      const counted = (next: () => LoadRequest) => (): LoadRequest => {
        on.sent += 1;
        return next();
      };
      // The SDK exports a batch every 512 spans while the load runs, so a
      // window's CPU holds its exports; what is still queued at its end
      // is waited for, so no export runs in the next scenario's window.
      // Spans the SDK dropped never arrive: the wait ends when the count
      // has not moved for longer than the SDK's 5 s between exports.
      const exported = async (): Promise<void> => {
        let last = -1;
        let movedAt = performance.now();
        while (performance.now() - movedAt < 6_000) {
          const { requestSpans } = (await (await fetch(`${sink.base}/count`)).json()) as {
            requestSpans: number;
          };
          if (requestSpans >= on.sent) return;
          if (requestSpans !== last) {
            last = requestSpans;
            movedAt = performance.now();
          }
          await new Promise((r) => setTimeout(r, 200));
        }
      };
      for (const [id, label, next] of [
        ['traced_unkeyed', 'unkeyed, tracing on (every request sampled)', unkeyed],
        ['traced_keyed', 'keyed, fresh key, tracing on (every request sampled)', keyed],
      ] as const) {
        if (!wanted(id)) continue;
        const window = httpWindow(counted(next), server, server.child.pid!);
        steady.push({
          id,
          label,
          window: async (seconds) => {
            const figures = await window(seconds);
            await exported();
            return figures;
          },
        });
      }
    }

    const measured = await runInterleaved(steady, {
      warmupSeconds: WARMUP,
      seconds: SECONDS,
      runs: RUNS,
      log,
    });
    for (const { scenario, figures } of measured) {
      scenarios.push(toScenario(scenario.id, scenario.label, figures));
    }
    for (const close of closers) await close();
    if (traced !== undefined) {
      // Stopping the traced server flushes what its SDK still buffers.
      await stopServer(traced.server);
      servers.splice(servers.indexOf(traced.server), 1);
      const received = (await (await fetch(`${traced.sink.base}/count`)).json()) as {
        posts: number;
        spans: number;
        requestSpans: number;
        refused: number;
      };
      log(
        `tracing on: ${String(traced.sent)} requests sent, ${String(received.requestSpans)} request spans received (${String(received.spans)} spans in ${String(received.posts)} posts, ${(received.spans / Math.max(1, received.requestSpans)).toFixed(1)} per request, ${String(received.refused)} posts refused)`,
      );
      delivered = {
        sent: traced.sent,
        requestSpans: received.requestSpans,
        spans: received.spans,
      };
    }

    /** A scenario of its own after the rounds: a warm-up, then its windows. */
    const run = async (
      id: string,
      label: string,
      next: () => LoadRequest,
      during?: () => Promise<unknown>,
    ): Promise<ScenarioFigures> => {
      const window = httpWindow(next, ours, serverPid);
      await window(WARMUP);
      // A window that runs beside the cleanup is measured once (the cleanup
      // empties the table), as long as the cleanup runs.
      if (during !== undefined) {
        const once = await measure({
          url: ours.base,
          path: TRANSFERS,
          connections: CONNECTIONS,
          seconds: DURING_CAP_SECONDS,
          next,
          serverPid,
          postmasterPid: pgPid,
          during,
        });
        return toScenario(id, label, once);
      }
      const windows: LoadFigures[] = [];
      for (let i = 0; i < RUNS; i++) windows.push(await window(SECONDS));
      log(`${label}: req/s of the windows ${windows.map((w) => w.rps.toFixed(0)).join(', ')}`);
      return toScenario(id, label, medianWindow(windows));
    };

    // The command line, against the same server: a process per transfer.
    let client: ClientFigures = {
      runs: 0,
      nodeMedianMs: NaN,
      httpMedianMs: NaN,
      transferMedianMs: NaN,
      transferMaxMs: NaN,
      overheadMedianMs: NaN,
      overheadMaxMs: NaN,
      exitAfterWriteMedianMs: NaN,
      exitAfterWriteMaxMs: NaN,
    };
    if (wanted('client')) {
      const main = builtClient(projectRoot());
      await fs.access(main).catch(() => {
        throw new Error(`${main} is missing: run the bench through make bench, which builds it`);
      });
      client = await runClient({
        base: ours.base,
        token,
        accounts,
        outbox: path.join(rootDir, 'client-outbox.sqlite'),
        main,
        runs: CLIENT_RUNS,
      });
      log(formatClient(client));
    }

    // Bursts of identical requests over their own sockets.
    const agent = new http.Agent({ keepAlive: true, maxSockets: BURST_SIZE });
    const burstMs: number[] = [];
    const effectsPerBurst: number[] = [];
    const answers: Record<string, number> = {};
    for (let b = 0; wanted('bursts') && b < BURSTS; b++) {
      const request = keyed();
      const key = request.headers['idempotency-key']!;
      const before = await owner<{ n: string }[]>`select count(*) as n from ledger_transfers`;
      const { answers: got, ms } = await burst(
        `${ours.base}${TRANSFERS}`,
        request,
        BURST_SIZE,
        agent,
      );
      const after = await owner<{ n: string }[]>`select count(*) as n from ledger_transfers`;
      burstMs.push(ms);
      effectsPerBurst.push(Number(after[0]!.n) - Number(before[0]!.n));
      const originals = got.filter((a) => a.status === 201 && !a.replay);
      for (const a of got) {
        const kind = `${String(a.status)}${a.replay ? ' replay' : ''}`;
        answers[kind] = (answers[kind] ?? 0) + 1;
        if (a.status === 201 && originals[0] !== undefined && a.body !== originals[0].body) {
          throw new Error(`burst ${key}: a replay differs from the original`);
        }
      }
    }
    agent.destroy();
    burstMs.sort((a, b) => a - b);

    // 1M live keys stored.
    if (wanted('keyed_1m')) {
      await seedKeys(owner, admin, principalId, SEEDED_KEYS, false);
      scenarios.push(
        await run('keyed_1m', `keyed, ${String(SEEDED_KEYS / 1e6)}M keys stored`, keyed),
      );
      await owner`truncate idempotency_keys`;
    }

    // Cleanup alone, then under keyed load (with the same table state without it first).
    const sync = createSyncModule({
      db,
      clock: systemClock,
      metrics: new InMemoryMetrics(),
      cleanupBatchSize: config.sync.idempotency_cleanup_batch_size,
      cleanupPacing: config.sync.idempotency_cleanup_pacing,
      cleanupIntervalMs: config.sync.idempotency_cleanup_interval,
    });
    let aloneRowsPerSecond = NaN;
    let bareDeleteRowsPerSecond = NaN;
    let underLoad = { deleted: 0, seconds: 0 };
    if (wanted('cleanup')) {
      const rates: number[] = [];
      const bare: number[] = [];
      const batch = config.sync.idempotency_cleanup_batch_size;
      for (let i = 0; i < RUNS; i++) {
        await seedKeys(owner, admin, principalId, SEEDED_KEYS, true);
        const started = performance.now();
        const alone = await sync.cleanup();
        rates.push(alone.deleted / ((performance.now() - started) / 1000));
        log(`cleanup alone: ${String(alone.deleted)} rows, ${rates.at(-1)!.toFixed(0)} rows/s`);
        await owner`truncate idempotency_keys`;
        // The limit: the job's statement (modules/sync/adapters/postgres/
        // expired-keys.ts) in a bare loop, same rows, batch size and role.
        await seedKeys(owner, admin, principalId, SEEDED_KEYS, true);
        const now = new Date();
        const at = performance.now();
        let deleted = 0;
        for (;;) {
          const result = await appSql`
            delete from idempotency_keys
             where ctid = any(array(
                     select ctid from idempotency_keys
                      where expires_at <= ${now}
                      order by expires_at
                      limit ${batch}))`;
          deleted += result.count;
          if (result.count < batch) break;
        }
        bare.push(deleted / ((performance.now() - at) / 1000));
        log(`bare batched DELETE: ${String(deleted)} rows, ${bare.at(-1)!.toFixed(0)} rows/s`);
        await owner`truncate idempotency_keys`;
      }
      rates.sort((a, b) => a - b);
      bare.sort((a, b) => a - b);
      aloneRowsPerSecond = rates[Math.floor(rates.length / 2)]!;
      bareDeleteRowsPerSecond = bare[Math.floor(bare.length / 2)]!;
      await seedKeys(owner, admin, principalId, SEEDED_KEYS, true);
      scenarios.push(
        await run(
          'cleanup_without',
          `keyed, ${String(SEEDED_KEYS / 1e6)}M expired keys, no cleanup`,
          keyed,
        ),
      );
      scenarios.push(
        await run('cleanup_during', 'keyed, cleanup running', keyed, async () => {
          const at = performance.now();
          const report = await sync.cleanup();
          underLoad = { deleted: report.deleted, seconds: (performance.now() - at) / 1000 };
        }),
      );
      log(
        `cleanup under load: ${String(underLoad.deleted)} rows in ${underLoad.seconds.toFixed(1)} s`,
      );
    }
    const figures: BenchFigures = {
      scenarios,
      bursts: {
        count: BURSTS,
        size: BURST_SIZE,
        medianMs: burstMs[Math.floor(burstMs.length / 2)] ?? NaN,
        maxMs: burstMs[burstMs.length - 1] ?? NaN,
        effectsPerBurst,
        answers,
      },
      cleanup: {
        rows: SEEDED_KEYS,
        aloneRowsPerSecond,
        bareDeleteRowsPerSecond,
        underLoadRowsPerSecond: underLoad.deleted / Math.max(underLoad.seconds, 1e-9),
      },
      client,
      ...(delivered === undefined ? {} : { tracing: delivered }),
    };
    const machine = {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model ?? 'unknown',
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      node: process.version,
      nodePinned: `v${PINNED_NODE}`,
      postgres: settings.find((s) => s.name === 'server_version')?.setting ?? 'unknown',
      settings: Object.fromEntries(settings.map((s) => [s.name, s.setting])),
    };
    const at = new Date().toISOString();
    const options = {
      seconds: SECONDS,
      warmup: WARMUP,
      connections: CONNECTIONS,
      seededKeys: SEEDED_KEYS,
      runs: RUNS,
      poolMax: config.database.pool_max,
      cleanupBatchSize: config.sync.idempotency_cleanup_batch_size,
      cleanupPacing: config.sync.idempotency_cleanup_pacing,
    };
    const complete = ONLY.size === 0;
    const results = {
      at,
      machine,
      options,
      figures,
      ...(complete ? { targets: judgeTargets(figures) } : {}),
    };
    const caption = `${machine.cpuModel}, ${String(machine.cpus)} cores, Node ${machine.node}, PostgreSQL ${machine.postgres} durable; ${at.slice(0, 10)}`;
    const dir = path.join(projectRoot(), '.bench-results');
    await fs.mkdir(dir, { recursive: true });
    const json = `${JSON.stringify(results, null, 2)}\n`;
    const svg = renderChart(figures, caption);
    await fs.writeFile(path.join(dir, `${at.replace(/[:.]/g, '-')}.json`), json);
    await fs.writeFile(path.join(dir, 'latest.json'), json);
    await fs.writeFile(path.join(dir, 'chart.svg'), svg);
    if (cli.publish) {
      const docs = path.join(projectRoot(), 'docs', 'performance');
      await fs.mkdir(docs, { recursive: true });
      await fs.writeFile(path.join(docs, 'results.json'), json);
      await fs.writeFile(path.join(docs, 'chart.svg'), svg);
    }
    process.stdout.write(`\n${caption}\n\n${complete ? formatReport(figures) : partial(figures)}`);
    log(`results in ${dir}`);
    await owner.end();
    await admin.end();
    await appSql.end();
  } finally {
    for (const s of servers) await stopServer(s).catch(() => undefined);
    await target.close();
    await fs.rm(rootDir, { recursive: true, force: true });
  }
}

await main();
