/**
 * Scale-out proof: four `api` processes and one `worker` process on one
 * database, over real sockets. 64 identical keyed transfers fired at once,
 * spread over the four listeners, move the money exactly once; every answer
 * is the original 201, a byte-identical replay of it, or `409
 * request_in_progress` while the first still runs. Assertions are on
 * outcomes only, never on timing.
 */
import t from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { createPrincipalWithToken } from '../../modules/identity/index.js';
import { installWorkerSchema } from '../../platform/jobs/index.js';
import { systemClock } from '../../kernel/clock/index.js';
import { testDatabase } from '../harness/db.js';
import { testUnitOfWork } from '../harness/uow.js';
import { startServerProcess, type ServerProcess } from '../harness/process.js';
import { stopProcesses } from './processes.js';

const API_PROCESSES = 4;
const REQUESTS = 64;
const OPENING = 10_000;
const AMOUNT = 2_500;
/** How long the processes' log lines may lag behind their answers. */
const LOG_DEADLINE_MS = 10_000;

/**
 * Reads which processes logged a completed request for each correlation id,
 * polling until every id is logged or the deadline passes: a process writes
 * its line after the answer, and the pipe may deliver it later still.
 *
 * @param processes the api processes, by index.
 * @param ids the correlation ids sent.
 * @param ms the deadline, from now.
 * @returns for each id logged, the indexes of the processes that logged it.
 */
async function servedBy(
  processes: readonly ServerProcess[],
  ids: ReadonlySet<string>,
  ms: number,
): Promise<Map<string, number[]>> {
  const deadline = performance.now() + ms;
  for (;;) {
    const found = new Map<string, number[]>();
    processes.forEach((p, i) => {
      for (const line of p.lines) {
        const id = line['correlation_id'];
        if (line['msg'] !== 'request completed' || typeof id !== 'string' || !ids.has(id)) continue;
        found.set(id, [...(found.get(id) ?? []), i]);
      }
    });
    if (found.size === ids.size || performance.now() >= deadline) return found;
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Answer {
  /** The process the request was sent to (the test's choice, not an observation). */
  readonly process: number;
  /** The Correlation-Id the request carried, unique to it. */
  readonly correlation: string;
  /** The Correlation-Id the answer carried. */
  readonly echoed: string | null;
  readonly status: number;
  readonly replay: string | null;
  readonly body: string;
}

void t.test('64 identical keyed transfers over 4 api processes move the money once', async (t) => {
  const db = await testDatabase(t);
  await installWorkerSchema(db.ownerUrl, db.state.app.name);
  const { db: pg, uow } = testUnitOfWork(t, db, { sql: db.app });
  const { token } = await createPrincipalWithToken(
    { db: pg, uow, clock: systemClock },
    { displayName: 'Scale-out tester' },
  );

  // Pools of 5: 5 processes use at most 25 connections of the server's 200,
  // whatever else the run has open.
  const env = {
    DATABASE__URL: db.appUrl,
    DATABASE__POOL_MAX: '5',
    HTTP__PORT: '0',
    HTTP__RATE_LIMIT_MAX: '10000',
    LOG__LEVEL: 'info',
  };
  const processes: ServerProcess[] = [];
  t.teardown(() => stopProcesses(processes));
  for (let i = 0; i < API_PROCESSES; i += 1) {
    processes.push(startServerProcess(['--role', 'api'], env));
  }
  const worker = startServerProcess(['--role', 'worker'], env);
  processes.push(worker);
  const bases = await Promise.all(
    processes
      .slice(0, API_PROCESSES)
      .map(
        async (p) => (await p.waitForLine((l) => l['msg'] === 'listening'))['address'] as string,
      ),
  );
  await worker.waitForLine((l) => l['msg'] === 'started');
  t.equal(new Set(bases).size, API_PROCESSES, 'four listeners on four ports');

  const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const open = async (base: string, name: string, opening: number): Promise<string> => {
    const res = await fetch(`${base}/api/v1/accounts`, {
      method: 'POST',
      headers: { ...auth, 'idempotency-key': newId() },
      body: JSON.stringify({ name, opening_balance: opening }),
    });
    t.equal(res.status, 201);
    return ((await res.json()) as { id: string }).id;
  };
  const a = await open(bases[0] ?? '', 'From', OPENING);
  const b = await open(bases[1] ?? '', 'To', 0);

  const key = newId();
  const body = JSON.stringify({ from_account_id: a, to_account_id: b, amount: AMOUNT });
  const answers: Answer[] = await Promise.all(
    Array.from({ length: REQUESTS }, async (_, i) => {
      const process = i % API_PROCESSES;
      const correlation = newId();
      const res = await fetch(`${bases[process] ?? ''}/api/v1/transfers`, {
        method: 'POST',
        headers: { ...auth, 'idempotency-key': key, 'correlation-id': correlation },
        body,
      });
      return {
        process,
        correlation,
        echoed: res.headers.get('correlation-id'),
        status: res.status,
        replay: res.headers.get('idempotent-replay'),
        body: await res.text(),
      };
    }),
  );

  const originals = answers.filter((x) => x.status === 201 && x.replay === 'false');
  t.equal(originals.length, 1, 'exactly one answer ran the transfer');
  const original = originals[0]?.body ?? '';
  const replays = answers.filter((x) => x.status === 201 && x.replay === 'true');
  t.ok(
    replays.every((x) => x.body === original),
    'every replay is byte-identical to the original',
  );
  const inProgress = answers.filter((x) => x.status === 409);
  t.ok(
    inProgress.every(
      (x) =>
        (JSON.parse(x.body) as { code: string }).code === 'request_in_progress' &&
        x.replay === null,
    ),
    'every 409 is request_in_progress',
  );
  t.comment(
    `${String(originals.length)} original, ${String(replays.length)} replays, ${String(inProgress.length)} in progress`,
  );
  t.equal(
    originals.length + replays.length + inProgress.length,
    REQUESTS,
    `no other answer: ${JSON.stringify(
      answers.filter(
        (x) => !originals.includes(x) && !replays.includes(x) && !inProgress.includes(x),
      ),
    )}`,
  );
  // Which process answered is read from the processes themselves: each
  // logs "request completed" with the request's correlation id, and only the
  // process that served a request can log its id. (Where the test sent a
  // request proves nothing: it is the test's own choice.)
  t.ok(
    answers.every((x) => x.echoed === x.correlation),
    'every answer echoes the correlation id its request carried',
  );
  const sent = new Set(answers.map((x) => x.correlation));
  const served = await servedBy(processes.slice(0, API_PROCESSES), sent, LOG_DEADLINE_MS);
  t.same(
    answers.filter((x) => served.get(x.correlation)?.length !== 1),
    [],
    'every request is in the log of exactly one process',
  );
  t.ok(
    answers.every((x) => served.get(x.correlation)?.[0] === x.process),
    'and that is the process it was sent to',
  );
  const answeredBy = new Set([...served.values()].flat());
  t.comment(
    `requests logged per process: ${processes
      .slice(0, API_PROCESSES)
      .map((_, i) => String([...served.values()].filter((w) => w.includes(i)).length))
      .join(', ')}`,
  );
  t.equal(answeredBy.size, API_PROCESSES, 'every process answered some, by its own log');

  const transfers = await db.app<{ id: string; amount: string }[]>`
    select id, amount::text from ledger_transfers`;
  t.same(
    transfers.map((r) => [r.id, Number(r.amount)]),
    [[(JSON.parse(original) as { id: string }).id, AMOUNT]],
    'exactly one transfer row, the one answered',
  );
  const balances = await db.app<{ id: string; balance: string }[]>`
    select id, balance::text from ledger_accounts`;
  t.same(
    Object.fromEntries(balances.map((r) => [r.id, Number(r.balance)])),
    { [a]: OPENING - AMOUNT, [b]: AMOUNT },
    'the balances changed once',
  );

  // After the burst, a late repeat on any process is a replay.
  for (const base of bases) {
    const res = await fetch(`${base}/api/v1/transfers`, {
      method: 'POST',
      headers: { ...auth, 'idempotency-key': key },
      body,
    });
    t.equal(res.headers.get('idempotent-replay'), 'true');
    t.equal(await res.text(), original);
  }

  t.same(await stopProcesses(processes), [0, 0, 0, 0, 0], 'every process drains and exits 0');
});
