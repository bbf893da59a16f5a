/**
 * Shared pieces of the process-level fault tests (sigkill, pg-restart,
 * commit-failure): a real `api` server process on a given database, a
 * principal with a token, accounts and keyed transfers over real sockets, and
 * the ledger's invariants read back from the tables.
 */
import type { Test } from 'tap';
import { systemClock } from '../../kernel/clock/index.js';
import { newId } from '../../kernel/ids/index.js';
import { createPrincipalWithToken } from '../../modules/identity/index.js';
import type { Sql } from '../../platform/pg/client.js';
import { PgDatabase, PgUnitOfWork } from '../../platform/pg/uow.js';
import { startScriptProcess, type ServerProcess } from '../harness/process.js';

export { assertLedgerInvariants } from '../harness/ledger-invariants.js';

/** A running `api` process and the base URL it listens on. */
export interface ApiProcess {
  readonly process: ServerProcess;
  readonly base: string;
}

/** One HTTP answer, reduced to what the tests compare. */
export interface Answer {
  readonly status: number;
  readonly replay: string | null;
  readonly body: string;
}

/** A server entry point of this repository and its arguments. */
export interface ServerEntry {
  readonly script: string;
  readonly args: readonly string[];
}

/** The real server in the api role. */
export const API_ENTRY: ServerEntry = { script: 'apps/server/main.ts', args: ['--role', 'api'] };

/**
 * Starts a server (by default `apps/server/main.ts --role api`) on a
 * database and waits until it listens. The rate limit is raised out of the
 * way; `env` adds or overrides.
 *
 * @param appUrl the database URL of the application role.
 * @param env further configuration.
 * @param entry the entry point, e.g. the benchmark's peer server.
 * @returns the process and its base URL.
 */
export async function startApi(
  appUrl: string,
  env: Record<string, string> = {},
  entry: ServerEntry = API_ENTRY,
): Promise<ApiProcess> {
  const process = startScriptProcess(entry.script, [...entry.args], {
    DATABASE__URL: appUrl,
    DATABASE__POOL_MAX: '5',
    HTTP__PORT: '0',
    HTTP__RATE_LIMIT_MAX: '1000000',
    LOG__LEVEL: 'info',
    ...env,
  });
  const line = await process.waitForLine((l) => l['msg'] === 'listening');
  return { process, base: line['address'] as string };
}

/**
 * Creates a principal with a first token through the identity module, as the
 * application role.
 *
 * @param app a pool as the application role.
 * @returns the bearer token.
 */
export async function newPrincipal(app: Sql): Promise<string> {
  const db = new PgDatabase(app);
  const uow = new PgUnitOfWork(db, {
    lockTimeoutMs: 5_000,
    statementTimeoutMs: 30_000,
    transactionTimeoutMs: 60_000,
    retryMax: 3,
  });
  const { token } = await createPrincipalWithToken(
    { db, uow, clock: systemClock },
    { displayName: 'Fault tester' },
  );
  return token;
}

/**
 * Sends one POST with a JSON body over a real socket.
 *
 * @param base the server's base URL.
 * @param path the path, starting with `/api/v1`.
 * @param token the bearer token.
 * @param body the exact body text.
 * @param key the Idempotency-Key, or undefined for an unkeyed request.
 * @returns status, replay header and body text; rejects on a socket error.
 */
export async function post(
  base: string,
  path: string,
  token: string,
  body: string,
  key: string | undefined,
): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
    },
    body,
  });
  return {
    status: res.status,
    replay: res.headers.get('idempotent-replay'),
    body: await res.text(),
  };
}

/**
 * Opens an account through the API (keyed) and records its opening balance.
 *
 * @param t the test.
 * @param base the server's base URL.
 * @param token the bearer token.
 * @param openings where opening balances are recorded, by account id.
 * @param name the account's name.
 * @param opening its opening balance.
 * @returns the account id.
 */
export async function openAccount(
  t: Test,
  base: string,
  token: string,
  openings: Map<string, bigint>,
  name: string,
  opening: number,
): Promise<string> {
  const res = await post(
    base,
    '/api/v1/accounts',
    token,
    JSON.stringify({ name, opening_balance: opening }),
    newId(),
  );
  t.equal(res.status, 201, `account ${name} opened`);
  const id = (JSON.parse(res.body) as { id: string }).id;
  openings.set(id, BigInt(opening));
  return id;
}

/**
 * Balances by account id, read as the owner.
 *
 * @param owner a pool as the owner role.
 * @returns every account's balance.
 */
export async function balances(owner: Sql): Promise<Record<string, number>> {
  const rows = await owner<{ id: string; balance: string }[]>`
    select id, balance::text as balance from ledger_accounts order by id`;
  return Object.fromEntries(rows.map((r) => [r.id, Number(r.balance)]));
}

/**
 * Rows of idempotency_keys still in progress (committed in that state), read
 * as the owner. Under the design there are never any.
 *
 * @param owner a pool as the owner role.
 * @returns their keys.
 */
export async function keysInProgress(owner: Sql): Promise<string[]> {
  const rows = await owner<{ key: string }[]>`
    select key from idempotency_keys where state <> 'completed' or response_status is null`;
  return rows.map((r) => r.key);
}

/**
 * Polls until a condition holds; outcome based, the deadline only keeps a
 * broken run from hanging.
 *
 * @param what what is awaited, for the error.
 * @param check resolves true once the condition holds.
 * @param deadlineMs how long to keep trying.
 * @throws Error naming what never happened.
 */
export async function eventually(
  what: string,
  check: () => Promise<boolean>,
  deadlineMs = 30_000,
): Promise<void> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`gave up waiting: ${what}`);
    await sleep(50);
  }
}

/**
 * Waits.
 *
 * @param ms milliseconds.
 * @returns a promise resolved after them.
 */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
