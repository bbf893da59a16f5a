/**
 * The pieces of the unit of work's fault loop (uow-fault-loop.test.ts): the
 * timeouts its application runs with, the points and ways a connection is
 * cut, one request sent and awaited within its bound, and a lane's
 * forwarder with the application on it.
 */
import postgres from 'postgres';
import type { Test } from 'tap';
import { startTestApp, type TestApp } from '../harness/app.js';
import { startForwarder, type CutWay, type Forwarder, type Trigger } from '../harness/forwarder.js';

/** The application's timeouts in the loop, in milliseconds: short, so a stall ends soon. */
export const TIMEOUTS = { lock: 150, statement: 300, transaction: 400, connect: 400 };
/** What the unit of work may take past its timeouts before it counts as hung. */
export const MARGIN_MS = 2000;
/** How long a request may take to end before it counts as hung. */
export const BOUND_MS = TIMEOUTS.transaction + TIMEOUTS.connect + MARGIN_MS;
/** Connections of each lane's pool. */
export const POOL_MAX = 10;

/** Where a connection is cut: the statement the forwarder matches, and when. */
export const POINTS: Record<string, Omit<Trigger, 'way'>> = {
  begin_sent: { match: /\bbegin\b/i, when: 'after' },
  key_answered: { match: /insert into idempotency_keys/, when: 'after_answer' },
  mid_handler: { match: /insert into test_effects/, when: 'before' },
  commit_unanswered: { match: /\bcommit\b/i, when: 'after' },
  commit_answered: { match: /\bcommit\b/i, when: 'after_answer' },
  // The bearer token's read, on the pool outside any transaction: a cut
  // there must be a 503, never a 401 that tells the client its token is bad.
  token_unsent: { match: /from api_tokens/, when: 'before' },
  token_unanswered: { match: /from api_tokens/, when: 'after' },
};

/**
 * A statement of the pool outside a transaction fails at its deadline, but
 * postgres.js gives no handle on its connection to close: a socket that
 * hears nothing stays with the driver until the operating system gives up
 * on it (docs/adr/0003-own-transactions.md). So the token read is cut only
 * in the ways a close reaches the process.
 */
export const POOL_WAYS: readonly CutWay[] = ['rst', 'fin', 'terminate'];

/** The code of an answer that says the COMMIT was sent and its answer lost. */
export const UNKNOWN = 'commit_outcome_unknown';

/** A request of a round: its label, whether it has a key, the outcome its handler is told. */
export interface Sent {
  readonly label: string;
  readonly keyed: boolean;
  readonly key: string;
  readonly outcome: string | undefined;
}

/** How a request ended: its status, problem code and the headers the loop judges. */
export interface Ended {
  readonly status: number;
  readonly code: string | undefined;
  readonly replay: string | undefined;
  readonly retryAfter: string | undefined;
  readonly body: string;
}

/**
 * Sends one request of a round to the application (keyed to
 * /api/v1/effects, unkeyed to /api/v1/plain-effects).
 *
 * @param k the lane's application.
 * @param r the request.
 * @returns Fastify's injected answer.
 */
function send(k: TestApp, r: Sent) {
  return k.app.http.inject({
    method: 'POST',
    url: r.keyed ? '/api/v1/effects' : '/api/v1/plain-effects',
    headers: {
      'content-type': 'application/json',
      ...k.alice.headers,
      ...(r.keyed ? { 'idempotency-key': r.key } : {}),
    },
    payload: JSON.stringify(
      r.outcome === undefined ? { label: r.label } : { label: r.label, outcome: r.outcome },
    ),
  });
}

/**
 * Sends one request and waits for its answer at most {@link BOUND_MS}.
 *
 * @param k the lane's application.
 * @param r the request.
 * @returns how it ended, or `hung` when no answer came in its bound.
 */
export async function ended(k: TestApp, r: Sent): Promise<Ended | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => {
      resolve('hung');
    }, BOUND_MS);
  });
  const answer = await Promise.race([send(k, r), hung]);
  clearTimeout(timer);
  if (answer === 'hung') return answer;
  let code: string | undefined;
  try {
    code = (JSON.parse(answer.body) as { code?: string }).code;
  } catch {
    code = undefined;
  }
  const replay = answer.headers['idempotent-replay'];
  const retryAfter = answer.headers['retry-after'];
  return {
    status: answer.statusCode,
    code,
    replay: typeof replay === 'string' ? replay : undefined,
    retryAfter: typeof retryAfter === 'string' ? retryAfter : undefined,
    body: answer.body,
  };
}

/**
 * Waits for a promise at most `ms`.
 *
 * @param p what to wait for.
 * @param ms the bound.
 * @returns its value, or `timeout`.
 */
export async function within<T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const out = await Promise.race([
    p,
    new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => {
        resolve('timeout');
      }, ms);
    }),
  ]);
  clearTimeout(timer);
  return out;
}

/** A lane's application and the forwarder its pool connects through. */
export interface Lane {
  readonly k: TestApp;
  readonly forwarder: Forwarder;
  /**
   * An administrator's pool on the lane's database: it sees every role's
   * sessions in pg_stat_activity, where another role's `state` and
   * `xact_start` read as null to a role that is not a member of it.
   */
  readonly admin: postgres.Sql;
}

/**
 * The application role's sessions that are in a transaction, as an
 * administrator sees them.
 *
 * @param lane the lane whose database is read.
 * @returns each one's state and the age of its transaction in seconds.
 */
export function openTransactions(lane: Lane): Promise<{ state: string; age: number }[]> {
  return lane.admin<{ state: string; age: number }[]>`
    select state, extract(epoch from now() - xact_start)::float8 as age
      from pg_stat_activity
     where datname = current_database() and usename = ${lane.k.tdb.state.app.name}
       and xact_start is not null and pid <> pg_backend_pid()`;
}

/** A lane's forwarder, the application on it, an administrator's pool. */
/**
 * Starts a lane: a forwarder (which cuts), the application with its pool
 * connecting through it, and an administrator's pool for
 * `pg_terminate_backend`; all closed by the test's teardown.
 *
 * @param t the test that owns them.
 * @returns the lane.
 */
export async function startLane(t: Test): Promise<Lane> {
  // Made once the test database exists, below.
  const admin: { sql?: postgres.Sql } = {};
  const forwarder = await startForwarder(1, {
    terminate: async (clientPort) => {
      const sql = admin.sql;
      if (sql === undefined) return;
      await sql`select pg_terminate_backend(pid) from pg_stat_activity where client_port = ${clientPort}`;
    },
  });
  t.teardown(() => forwarder.close());
  const k = await startTestApp(t, {
    env: {
      DATABASE__POOL_MAX: String(POOL_MAX),
      DATABASE__LOCK_TIMEOUT: `${String(TIMEOUTS.lock)}ms`,
      DATABASE__STATEMENT_TIMEOUT: `${String(TIMEOUTS.statement)}ms`,
      DATABASE__TRANSACTION_TIMEOUT: `${String(TIMEOUTS.transaction)}ms`,
      DATABASE__CONNECT_TIMEOUT: `${String(TIMEOUTS.connect)}ms`,
      DATABASE__TX_RETRY_MAX: '1',
      // Every request reads its token, so cuts meet the pool's reads too.
      IDENTITY__TOKEN_CACHE_TTL: '0s',
      LOG__LEVEL: 'fatal',
    },
    appUrl: (url) => {
      const u = new URL(url);
      forwarder.switchTo(Number(u.port));
      u.port = String(forwarder.port);
      return u.toString();
    },
  });
  const adminSql = postgres(k.tdb.adminUrl, { max: 2, onnotice: () => undefined });
  admin.sql = adminSql;
  t.teardown(() => adminSql.end({ timeout: 1 }));
  return { k, forwarder, admin: adminSql };
}
