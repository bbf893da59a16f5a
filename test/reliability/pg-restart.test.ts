/**
 * PostgreSQL restarts under keyed transfers; the server survives and every
 * transfer takes effect exactly once.
 *
 * The file runs a PostgreSQL 18 of its own (so stopping it disturbs no other
 * test file), migrates a database on it per test as the harness does, and
 * starts an `api` process on that database. A restart is `pg_ctl stop -m
 * fast` and a start on the same data folder and port. So that a restart hits
 * transactions in flight (and not only idle connections), an account is held
 * with `SELECT ... FOR UPDATE` until some transfer waits on it inside its
 * transaction; the shutdown then terminates that transaction.
 *
 * 1. A stream: several clients send keyed transfers, each with its own keys,
 *    and retry every request with the same key and body on a 5xx, a
 *    connection error and `409 request_in_progress` until it gets a final
 *    answer; PostgreSQL restarts mid-stream. Afterwards the server process is
 *    still the one started; every request ended in a 201; the transfers in
 *    the table are exactly those answered 201 (one per key, linked by the key
 *    row's resource id); every key row is completed; a repeat of every key is
 *    a byte-identical replay; the ledger's invariants hold. The 5xx answers
 *    and connection errors seen are reported as a comment. The held account
 *    is the one with the lowest id, so the transfers waiting on it have
 *    locked (and sent) no row yet: the second test covers the other case.
 * 2. A restart that cuts a query in the middle of its result (the transfer's
 *    two-row `FOR UPDATE` has sent its first row and waits on the second):
 *    the retry of that transfer, with the same valid token, is answered 201
 *    and moves the money once.
 *
 * `SOAK=1` runs more clients, more requests and more restarts.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { EmbeddedPostgres } from '../../platform/pg/embedded.js';
import { ensureDatabase, ensureLoginRole } from '../../platform/pg/roles.js';
import { runMigrations } from '../../platform/migrate/index.js';
import { randomSequence } from '../harness/seed.js';
import { bySoak } from '../harness/soak.js';
import { stopProcesses } from '../e2e/processes.js';
import {
  assertLedgerInvariants,
  eventually,
  keysInProgress,
  newPrincipal,
  openAccount,
  post,
  sleep,
  startApi,
  type Answer,
  type ApiProcess,
} from './fault-helpers.js';

const CLIENTS = bySoak(4, 8);
const REQUESTS_PER_CLIENT = bySoak(30, 120);
const RESTARTS = bySoak(1, 3);
const ACCOUNTS = 4;
const OPENING = 1_000_000_000;
/** Attempts per request before the test gives up on it (a failure). */
const MAX_ATTEMPTS = 120;

/** What one client's request ended with. */
interface Outcome {
  readonly key: string;
  readonly body: string;
  readonly final: Answer | null;
  readonly attempts: number;
}

/** What the clients saw on the way, for the report. */
interface Tally {
  readonly fiveXx: Map<number, number>;
  connectionErrors: number;
  inProgress: number;
  finals: number;
}

function newTally(): Tally {
  return { fiveXx: new Map(), connectionErrors: 0, inProgress: 0, finals: 0 };
}

function describeTally(tally: Tally): string {
  const fiveXx = [...tally.fiveXx.values()].reduce((a, b) => a + b, 0);
  return (
    `5xx answers: ${String(fiveXx)} ${JSON.stringify(Object.fromEntries(tally.fiveXx))}; ` +
    `connection errors: ${String(tally.connectionErrors)}; ` +
    `409 request_in_progress: ${String(tally.inProgress)}`
  );
}

/**
 * Sends one keyed transfer until it gets a final answer: a 5xx, a socket
 * error and `409 request_in_progress` are retried with the same key and body
 * after a short backoff, up to {@link MAX_ATTEMPTS}.
 */
async function sendUntilFinal(
  base: string,
  token: string,
  key: string,
  body: string,
  tally: Tally,
): Promise<Outcome> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt += 1) {
    let answer: Answer;
    try {
      answer = await post(base, '/api/v1/transfers', token, body, key);
    } catch {
      tally.connectionErrors += 1;
      await sleep(Math.min(20 * attempt, 250));
      continue;
    }
    if (answer.status >= 500) {
      tally.fiveXx.set(answer.status, (tally.fiveXx.get(answer.status) ?? 0) + 1);
      await sleep(Math.min(20 * attempt, 250));
      continue;
    }
    if (
      answer.status === 409 &&
      (JSON.parse(answer.body) as { code?: string }).code === 'request_in_progress'
    ) {
      tally.inProgress += 1;
      await sleep(Math.min(20 * attempt, 250));
      continue;
    }
    tally.finals += 1;
    return { key, body, final: answer, attempts: attempt };
  }
  tally.finals += 1;
  return { key, body, final: null, attempts: MAX_ATTEMPTS };
}

/** The file's own PostgreSQL, with the test roles. */
interface Cluster {
  /** The running server (a new handle after each restart). */
  current(): EmbeddedPostgres;
  /** `pg_ctl stop -m fast`, then a start on the same folder and port. */
  restart(): Promise<void>;
  /** A fresh migrated database: URLs as the application role and the owner. */
  database(name: string): Promise<{ appUrl: string; ownerUrl: string; adminUrl: string }>;
  readonly appRole: string;
}

async function startCluster(t: Test): Promise<Cluster> {
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'app-test-pg-restart-'));
  let pg = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true });
  const port = pg.port;
  t.teardown(async () => {
    await pg.stop('immediate');
    await fs.rm(root, { recursive: true, force: true });
  });
  // Roles as the harness's before script makes them.
  const owner = { name: 'restart_owner', password: randomBytes(18).toString('base64url') };
  const app = { name: 'restart_app', password: randomBytes(18).toString('base64url') };
  const setup = createSql(pg.adminUrl(), { max: 1, applicationName: 'test-harness' });
  try {
    await ensureLoginRole(setup, owner);
    await ensureLoginRole(setup, app);
  } finally {
    await setup.end();
  }
  return {
    current: () => pg,
    restart: async () => {
      await pg.stop('fast');
      pg = await EmbeddedPostgres.start({ rootDir: root, port, ephemeral: true });
    },
    database: async (name) => {
      const admin = createSql(pg.adminUrl(), { max: 1, applicationName: 'test-harness' });
      try {
        await ensureDatabase(admin, name, owner.name);
      } finally {
        await admin.end();
      }
      const ownerUrl = pg.urlFor(owner.name, owner.password, name);
      await runMigrations({ ownerUrl, appRole: app.name });
      // graphile-migrate closes its pool about 200 ms after use; a restart
      // must not meet its last connection (its error handler exits the
      // process).
      await sleep(300);
      return {
        appUrl: pg.urlFor(app.name, app.password, name),
        ownerUrl,
        adminUrl: pg.adminUrl(name),
      };
    },
    appRole: app.name,
  };
}

/** An account row held by the test, and how to wait for a transfer behind it. */
interface Hold {
  /** Settles when the holding statement ends (the server stopped). */
  readonly held: Promise<void>;
  /** Resolves once a backend of the role waits behind the hold. */
  blocked(): Promise<void>;
  /** Ends the holder's pool. */
  end(): Promise<void>;
}

/**
 * Holds an account row with `SELECT ... FOR UPDATE` in one statement that then
 * sleeps (no client transaction: one would try to write its ROLLBACK to the
 * dead connection when the server stops); resolves once the row is held.
 */
async function hold(adminUrl: string, appRole: string, account: string): Promise<Hold> {
  const holder = createSql(adminUrl, { max: 1, applicationName: 'test-holder' });
  const held = holder`
    select pg_sleep(600)
      from (select id from ledger_accounts where id = ${account} for update) as locked`.then(
    () => undefined,
    () => undefined,
  );
  const watch = async (what: string, query: (observer: Sql) => PromiseLike<readonly unknown[]>) => {
    const observer = createSql(adminUrl, { max: 1, applicationName: 'test-observer' });
    try {
      await eventually(what, async () => (await query(observer)).length > 0, 60_000);
    } finally {
      await observer.end();
    }
  };
  await watch(
    'the holder sleeps with the row locked',
    (o) => o`
      select 1 from pg_stat_activity
       where application_name = 'test-holder' and wait_event = 'PgSleep'`,
  );
  return {
    held,
    blocked: () =>
      watch(
        'a transfer blocks on the held account',
        (o) => o`
          select 1 from pg_stat_activity s
           where s.usename = ${appRole}
             and s.wait_event_type = 'Lock'
             and exists (select 1 from pg_stat_activity h
                          where h.application_name = 'test-holder'
                            and h.pid = any(pg_blocking_pids(s.pid)))`,
      ),
    end: () => holder.end({ timeout: 1 }),
  };
}

void t.test('PostgreSQL restarts under keyed transfers', async (t) => {
  const cluster = await startCluster(t);

  void t.test('a stream of keyed transfers across restarts: each takes effect once', async (t) => {
    const db = await cluster.database('restart_stream');
    const processes: ApiProcess[] = [];
    const pools: Sql[] = [];
    t.teardown(async () => {
      await stopProcesses(processes.map((p) => p.process));
      await Promise.all(pools.map((p) => p.end({ timeout: 1 }).catch(() => undefined)));
    });
    const setupApp = createSql(db.appUrl, { max: 1, applicationName: 'test-app' });
    const token = await newPrincipal(setupApp).finally(() => setupApp.end());

    // A lock timeout far beyond the test's waits: the transfers blocked
    // behind the held account must still be waiting when PostgreSQL stops.
    const api = await startApi(db.appUrl, { DATABASE__LOCK_TIMEOUT: '2m' });
    processes.push(api);
    const openings = new Map<string, bigint>();
    const accounts: string[] = [];
    for (let i = 0; i < ACCOUNTS; i += 1) {
      accounts.push(await openAccount(t, api.base, token, openings, `Account ${i}`, OPENING));
    }
    const lowest = [...accounts].sort()[0] ?? '';

    const tally = newTally();
    const total = CLIENTS * REQUESTS_PER_CLIENT;
    const clients = Array.from({ length: CLIENTS }, async (_, c): Promise<Outcome[]> => {
      const next = randomSequence(c + 1);
      const outcomes: Outcome[] = [];
      for (let i = 0; i < REQUESTS_PER_CLIENT; i += 1) {
        const from = Math.floor(next() * ACCOUNTS);
        const to = (from + 1 + Math.floor(next() * (ACCOUNTS - 1))) % ACCOUNTS;
        const body = JSON.stringify({
          from_account_id: accounts[from],
          to_account_id: accounts[to],
          amount: 1 + Math.floor(next() * 100),
        });
        outcomes.push(await sendUntilFinal(api.base, token, newId(), body, tally));
      }
      return outcomes;
    });

    // The restarts, spread over the stream, each with transfers in flight.
    const restarter = (async () => {
      for (let r = 1; r <= RESTARTS; r += 1) {
        const threshold = Math.floor((total * r) / (RESTARTS + 1));
        await eventually(
          `${String(threshold)} requests answered`,
          () => Promise.resolve(tally.finals >= threshold),
          120_000,
        );
        const h = await hold(db.adminUrl, cluster.appRole, lowest);
        await h.blocked();
        await cluster.restart();
        await h.held;
        await h.end();
      }
    })();
    const [outcomes] = await Promise.all([Promise.all(clients).then((o) => o.flat()), restarter]);

    const fiveXx = [...tally.fiveXx.values()].reduce((a, b) => a + b, 0);
    t.comment(
      `${String(total)} keyed transfers by ${String(CLIENTS)} clients, ${String(RESTARTS)} restart(s); ` +
        `${describeTally(tally)}; most attempts for one request: ${String(Math.max(...outcomes.map((o) => o.attempts)))}`,
    );
    t.equal(api.process.child.exitCode, null, 'the server process survived the restarts');
    t.equal(api.process.child.signalCode, null);
    t.ok(
      fiveXx + tally.connectionErrors >= RESTARTS,
      'the transfers in flight at each stop were answered with a 5xx (or lost) and retried',
    );
    t.equal(outcomes.length, total);
    t.same(
      outcomes.filter((o) => o.final?.status !== 201),
      [],
      'every request ended in a 201',
    );

    const owner = createSql(db.ownerUrl, { max: 2, applicationName: 'test-owner' });
    pools.push(owner);
    const answered = outcomes
      .filter((o) => o.final?.status === 201)
      .map((o) => (JSON.parse(o.final?.body ?? '{}') as { id: string }).id)
      .sort();
    const transfers = await owner<{ id: string }[]>`select id from ledger_transfers order by id`;
    t.equal(transfers.length, answered.length, 'as many transfers as 201 answers');
    t.same(
      transfers.map((r) => r.id),
      answered,
      'the transfers are exactly those answered',
    );
    const keyRows = await owner<{ key: string; state: string; resource_id: string | null }[]>`
      select key, state, resource_id from idempotency_keys where action = 'createTransfer'`;
    const byKey = new Map(keyRows.map((r) => [r.key, r]));
    t.equal(keyRows.length, total, 'one key row per request');
    t.same(
      outcomes.filter((o) => {
        const row = byKey.get(o.key);
        const id = (JSON.parse(o.final?.body ?? '{}') as { id?: string }).id;
        return row === undefined || row.state !== 'completed' || row.resource_id !== id;
      }),
      [],
      'each key row is completed and names the transfer its client got',
    );
    t.same(await keysInProgress(owner), [], 'no idempotency key row is left in progress');
    await assertLedgerInvariants(t, owner, openings);

    // Every key again, retried like the stream: each is a replay of the
    // answer its client got, and no money moves.
    const repeatTally = newTally();
    const repeats = await Promise.all(
      outcomes.map((o) => sendUntilFinal(api.base, token, o.key, o.body, repeatTally)),
    );
    t.comment(`repeats after the stream: ${describeTally(repeatTally)}`);
    t.same(
      repeats.filter(
        (r, i) => r.final?.replay !== 'true' || r.final.body !== outcomes[i]?.final?.body,
      ),
      [],
      'a repeat of every key is a byte-identical replay',
    );
    const [after] = await owner<{ n: string }[]>`select count(*)::text as n from ledger_transfers`;
    t.equal(Number(after?.n), answered.length, 'the repeats moved no money');

    t.same(
      await stopProcesses(processes.map((p) => p.process)),
      [0],
      'the server drains and exits 0',
    );
  });

  void t.test(
    'a restart that cuts a query mid-result: the retry with the same token and key succeeds once',
    async (t) => {
      const db = await cluster.database('restart_mid_result');
      const processes: ApiProcess[] = [];
      t.teardown(() => stopProcesses(processes.map((p) => p.process)));
      const setupApp = createSql(db.appUrl, { max: 1, applicationName: 'test-app' });
      const token = await newPrincipal(setupApp).finally(() => setupApp.end());
      // One pooled connection: the next request after the restart runs on
      // the connection whose query was cut. What this guards against: a
      // driver that carries the cut query's state (its error, its row count)
      // into the next session answers the retry's token lookup with a
      // sparse result, read as "no such token" (401).
      const api = await startApi(db.appUrl, {
        DATABASE__LOCK_TIMEOUT: '2m',
        DATABASE__POOL_MAX: '1',
      });
      processes.push(api);
      const openings = new Map<string, bigint>();
      const a = await openAccount(t, api.base, token, openings, 'A', OPENING);
      const b = await openAccount(t, api.base, token, openings, 'B', OPENING);
      // The transfer locks its accounts in id order: holding the higher id
      // lets it lock (and send) the first row, then wait on the second.
      const higher = a > b ? a : b;

      const key = newId();
      const body = JSON.stringify({ from_account_id: a, to_account_id: b, amount: 7 });
      const h = await hold(db.adminUrl, cluster.appRole, higher);
      const cut = post(api.base, '/api/v1/transfers', token, body, key).catch(
        (err: unknown) => err as Error,
      );
      await h.blocked();
      await cluster.restart();
      await h.held;
      await h.end();
      const first = await cut;
      t.ok(
        first instanceof Error || first.status >= 500,
        `the transfer cut by the restart is not answered as done: ${first instanceof Error ? first.message : String(first.status)}`,
      );

      const tally = newTally();
      const retry = await sendUntilFinal(api.base, token, key, body, tally);
      t.comment(`retry: ${describeTally(tally)}`);
      t.equal(
        retry.final?.status,
        201,
        `the retry with the same valid token and key is a 201: ${retry.final?.body ?? 'no final answer'}`,
      );
      const owner = createSql(db.ownerUrl, { max: 1, applicationName: 'test-owner' });
      t.teardown(() => owner.end({ timeout: 1 }));
      const transfers = await owner<{ id: string }[]>`select id from ledger_transfers`;
      t.equal(transfers.length, retry.final?.status === 201 ? 1 : 0, 'one transfer, or none');
      t.same(await keysInProgress(owner), [], 'no idempotency key row is left in progress');
      await assertLedgerInvariants(t, owner, openings);
      t.equal(api.process.child.exitCode, null, 'the server process survived the restart');
    },
  );
});
