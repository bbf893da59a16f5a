/**
 * "Every unit of work ends", as a randomized property: rounds of parallel
 * keyed and unkeyed requests of the real application, whose PostgreSQL
 * connections run through a forwarder that cuts one connection at a random
 * point of a transaction (BEGIN sent and unanswered, the key's insert
 * answered, in the middle of the handler's statements, COMMIT sent and
 * unanswered, COMMIT answered) in a random way (reset, close, half-open,
 * black hole, pg_terminate_backend), or the bearer token's read on the
 * pool, while some handlers raise an ERROR with SQLSTATE 08006 or 57P01 on
 * their live session.
 *
 * After every round, for every request: it ended (an answer or a clear
 * 5xx, never a 401 for its valid token) within transaction_timeout plus
 * the connect timeout plus a margin;
 * no unhandled rejection; the pool answers as many parallel queries as it
 * has connections; no session of the application sits idle in a
 * transaction; a repeat of each keyed request gets the stored answer or
 * runs afresh, never 409 (no single-flight turn and no key row held by a
 * request that ended); each keyed effect exists exactly once, an unkeyed
 * one exactly when its answer was a 2xx (either way after an answer that
 * says the outcome is unknown); no key row in progress.
 *
 * The seed is drawn afresh each run and printed; `SEED=<n>` repeats one.
 * `make check` runs 400 cuts (`FAULT_CUTS` overrides), `make soak` 10,000.
 */
import { randomInt } from 'node:crypto';
import t from 'tap';
import postgres from 'postgres';
import { newId } from '../../kernel/ids/index.js';
import { startTestApp, type TestApp } from '../harness/app.js';
import { CUT_WAYS, startForwarder, type CutWay, type Trigger } from '../harness/forwarder.js';
import { soak } from '../harness/soak.js';

const TIMEOUTS = { lock: 150, statement: 300, transaction: 400, connect: 400 };
/** What the unit of work may take past its timeouts before it counts as hung. */
const MARGIN_MS = 2000;
const BOUND_MS = TIMEOUTS.transaction + TIMEOUTS.connect + MARGIN_MS;
// 400 in make check: with the half-open and black-hole cuts waiting out
// the stall deadline, a cut costs about 0.6 s of wall time on two cores.
const CUTS = Number(process.env['FAULT_CUTS'] ?? (soak ? 10_000 : 400));
const PER_ROUND = 8;
const POOL_MAX = 10;

// A thousand cuts, many of them waiting out a timeout on purpose, take
// longer than the suite's three minutes per file on two cores.
t.setTimeout(600_000);

function drawSeed(): number {
  const given = process.env['SEED'];
  if (given === undefined || given.trim() === '') return randomInt(2 ** 31);
  const value = Number(given);
  if (!Number.isInteger(value) || value < 0 || value >= 2 ** 31) {
    throw new Error(`SEED must be an integer from 0 to 2147483647, got "${given}"`);
  }
  return value;
}

/** mulberry32: small, fast and good enough to pick cases. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const POINTS: Record<string, Omit<Trigger, 'way'>> = {
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
const POOL_WAYS: readonly CutWay[] = ['rst', 'fin', 'terminate'];

/** The code of an answer that says the COMMIT was sent and its answer lost. */
const UNKNOWN = 'commit_outcome_unknown';

interface Sent {
  readonly label: string;
  readonly keyed: boolean;
  readonly key: string;
  readonly outcome: string | undefined;
}

interface Ended {
  readonly status: number;
  readonly code: string | undefined;
  readonly replay: string | undefined;
  readonly retryAfter: string | undefined;
  readonly body: string;
}

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

async function ended(k: TestApp, r: Sent): Promise<Ended | 'hung'> {
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

async function within<T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> {
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

void t.test('every unit of work ends, whatever cuts its connection', async (t) => {
  const seed = drawSeed();
  const random = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T;
  t.comment(`seed ${String(seed)} (replay with SEED=${String(seed)}), ${String(CUTS)} cuts`);

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

  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown): void => {
    unhandled.push(err);
  };
  process.on('unhandledRejection', onUnhandled);
  t.teardown(() => process.off('unhandledRejection', onUnhandled));

  const failures: string[] = [];
  const fail = (what: string): void => {
    failures.push(what);
    t.fail(what);
  };
  let cuts = 0;
  let requests = 0;
  const seen = new Map<string, number>();
  for (let round = 0; cuts < CUTS && failures.length < 3; round++) {
    const sent: Sent[] = [];
    for (let i = 0; i < PER_ROUND * 2; i++) {
      const roll = random();
      sent.push({
        label: `r${String(round)}-${String(i)}`,
        keyed: i % 2 === 0,
        key: newId(),
        outcome: roll < 0.05 ? 'raise_08006' : roll < 0.1 ? 'raise_57P01' : undefined,
      });
    }
    const armed = Array.from({ length: PER_ROUND }, () => {
      const point = pick(Object.keys(POINTS));
      const way: CutWay = pick(point.startsWith('token_') ? POOL_WAYS : CUT_WAYS);
      const handle = forwarder.arm({ ...(POINTS[point] as Omit<Trigger, 'way'>), way });
      let fired = false;
      void handle.fired.then(() => {
        fired = true;
      });
      return { point, way, handle, isFired: () => fired };
    });
    const answers = await Promise.all(sent.map((r) => ended(k, r)));
    forwarder.disarmAll();
    const firedNow = armed.filter((a) => a.isFired());
    cuts += firedNow.length;
    requests += sent.length;
    for (const a of firedNow) {
      const name = `${a.point}/${a.way}`;
      seen.set(name, (seen.get(name) ?? 0) + 1);
    }
    const cutsText = firedNow.map((a) => `${a.point}/${a.way}`).join(', ');
    const where = `round ${String(round)} (seed ${String(seed)}; cuts ${cutsText})`;

    answers.forEach((a, i) => {
      const r = sent[i] as Sent;
      if (a === 'hung') fail(`${where}: ${r.label} did not end within ${String(BOUND_MS)} ms`);
      else if (a.code === UNKNOWN && (a.retryAfter !== undefined) !== r.keyed)
        // A blind repeat of an unkeyed request could double it: only the
        // keyed answer invites one.
        fail(
          `${where}: ${r.label} (keyed ${String(r.keyed)}) answered ${UNKNOWN} with Retry-After ${String(a.retryAfter)}`,
        );
      else if (a.status === 401)
        fail(`${where}: ${r.label} with a valid token answered 401 ${String(a.code)}`);
      else if (a.status >= 500 && a.code === undefined)
        fail(`${where}: ${r.label} answered ${String(a.status)} without a problem code`);
    });
    if (unhandled.length > 0) {
      fail(`${where}: unhandled rejection ${unhandled.splice(0).map(String).join('; ')}`);
    }

    // Nothing left open in PostgreSQL: the server's own timeouts end what
    // the process abandoned, so allow them their time.
    const deadline = performance.now() + BOUND_MS;
    let open: { state: string; age: number }[] = [];
    for (;;) {
      open = await k.tdb.owner<{ state: string; age: number }[]>`
        select state, extract(epoch from now() - xact_start)::float8 as age
          from pg_stat_activity
         where datname = current_database() and usename = ${k.tdb.state.app.name}
           and xact_start is not null and pid <> pg_backend_pid()`;
      if (open.length === 0 || performance.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    if (open.length > 0) fail(`${where}: sessions still in a transaction: ${JSON.stringify(open)}`);

    // Every connection of the pool can be had at once: reserved together,
    // so a connection left reserved or stuck is missed (parallel queries
    // would be pipelined onto the connections that still work). Through the
    // unit of work's reservations: the driver's own reserve() can drop a
    // waiter when a connection closes (docs/adr/0003-own-transactions.md).
    const reserving = Array.from({ length: POOL_MAX }, () =>
      k.app.db.reservations.reserve(BOUND_MS),
    );
    // The driver's connection of each, to hand back only one still open:
    // postgres.js would put a closed one back in the pool, and the next
    // statement on it throws outside any promise (platform/pg/uow-faults.test.ts).
    const connections = new Map<postgres.ReservedSql, { reserved?: unknown }>();
    const probe = await within(
      Promise.all(
        reserving.map(async (p) => {
          const r = await p;
          return r.unsafe('select 1 as one', [], {
            onexecute: (connection: { reserved?: unknown }) => {
              connections.set(r, connection);
              return true;
            },
          } as postgres.UnsafeQueryOptions);
        }),
      ),
      BOUND_MS,
    ).catch((err: unknown) => err);
    for (const p of reserving) {
      void p.then(
        (r) => {
          const connection = connections.get(r);
          if (connection === undefined || connection.reserved) r.release();
        },
        () => undefined,
      );
    }
    if (probe === 'timeout')
      fail(`${where}: the pool did not give its ${String(POOL_MAX)} connections at once`);

    // Repeats, with no cut armed.
    for (const [i, r] of sent.entries()) {
      const first = answers[i];
      if (!r.keyed || first === 'hung' || first === undefined) continue;
      const again = await ended(k, r);
      if (again === 'hung') {
        fail(`${where}: the repeat of ${r.label} did not end`);
        continue;
      }
      if (again.code === 'request_in_progress') {
        fail(`${where}: the repeat of ${r.label} found its key still held (${again.body})`);
        continue;
      }
      if (r.outcome !== undefined) {
        if (again.status < 500)
          fail(`${where}: ${r.label} raising ${r.outcome} answered ${String(again.status)}`);
        continue;
      }
      if (again.status >= 500) {
        // The repeat may meet a connection the round's cuts left to reconnect.
        const third = await ended(k, r);
        if (third === 'hung' || third.status !== 201) {
          fail(`${where}: the repeat of ${r.label} failed twice: ${again.body}`);
          continue;
        }
        Object.assign(again, third);
      }
      if (first.status === 201) {
        if (again.replay !== 'true' || again.body !== first.body) {
          fail(
            `${where}: ${r.label} answered 201, its repeat is not the stored answer: ${again.status} ${again.body}`,
          );
        }
      } else if (first.code !== UNKNOWN && again.replay === 'true') {
        fail(
          `${where}: ${r.label} answered ${String(first.status)} ${String(first.code)} (nothing happened), but its repeat replays a stored answer`,
        );
      }
    }

    const effects = await k.tdb.owner<{ label: string; n: number }[]>`
      select label, count(*)::int as n from test_effects
       where label like ${`r${String(round)}-%`} group by label`;
    const count = new Map(effects.map((e) => [e.label, e.n]));
    answers.forEach((a, i) => {
      const r = sent[i] as Sent;
      const n = count.get(r.label) ?? 0;
      if (a === 'hung') return;
      if (r.outcome !== undefined) {
        if (n !== 0) fail(`${where}: ${r.label} raised ${r.outcome} and left ${String(n)} effects`);
      } else if (r.keyed) {
        if (n !== 1) fail(`${where}: keyed ${r.label} has ${String(n)} effects after its repeat`);
      } else if (a.status === 201 ? n !== 1 : a.code === UNKNOWN ? n > 1 : n !== 0) {
        fail(
          `${where}: unkeyed ${r.label} answered ${String(a.status)} ${String(a.code)} and has ${String(n)} effects`,
        );
      }
    });
    const [held] = await k.tdb.owner<{ n: number }[]>`
      select count(*)::int as n from idempotency_keys where state = 'in_progress'`;
    if ((held?.n ?? 0) !== 0) fail(`${where}: ${String(held?.n)} key rows in progress`);
  }
  t.comment(
    `${String(cuts)} cuts over ${String(requests)} requests: ${[...seen.entries()]
      .sort()
      .map(([name, n]) => `${name} ${String(n)}`)
      .join(', ')}`,
  );
  t.equal(failures.length, 0, `no failure (seed ${String(seed)})`);
  t.ok(cuts >= CUTS || failures.length > 0, 'every cut asked for was made');
});
