/**
 * One client process of the failover test: an application that uses the
 * client library of apps/client. It states its transfers in its own durable
 * outbox (one file per process), then drains the outbox with the library's
 * sender, which repeats each intent with its key by the API's retry rules
 * until it has a final answer. Every event of the sender is written to
 * standard output as one JSON line with the wall-clock time, so the test can
 * follow the load and measure what a client saw.
 *
 * Configuration, from the environment:
 * - `FAILOVER_CLIENT_OUTBOX`: the outbox file;
 * - `FAILOVER_CLIENT_BASE_URL`, `FAILOVER_CLIENT_TOKEN`: the server and the
 *   bearer token;
 * - `FAILOVER_CLIENT_ACCOUNTS`: the account ids, comma separated;
 * - `FAILOVER_CLIENT_TRANSFERS`: how many transfers to state first;
 * - `FAILOVER_CLIENT_STOP_FILE`: a file the test creates once the last
 *   failover is behind it. Until it exists, a client that has drained its
 *   outbox states `FAILOVER_CLIENT_BATCH` more transfers (default 20) and
 *   drains again, so the load lasts through every failover however long a
 *   rebuild takes; each batch is stated with a `stated` line;
 * - `FAILOVER_CLIENT_INDEX`: this client's number (it varies the transfers);
 * - `FAILOVER_CLIENT_DEADLINE_MS`: how long the drain may run, so a server
 *   that never comes back ends the process with intents pending instead of
 *   hanging the test.
 *
 * Every intent is stated once, before it is sent. A process started on an
 * outbox that already holds intents (the test kills a client during a
 * failover and starts it again) states nothing at first: it resumes,
 * drains what the killed process left with the same keys, and numbers its
 * later batches on from the intents already there (`resumed` line).
 *
 * Exits 0 once nothing is pending, 1 with a line on standard error otherwise.
 */
import { existsSync } from 'node:fs';
import { Outbox } from '../../apps/client/outbox.js';
import { Sender, type SendEvent } from '../../apps/client/sender.js';

function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`${name} is not set`);
  return value;
}

function line(fields: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify({ at: Date.now(), ...fields })}\n`);
}

function describe(event: SendEvent): Record<string, unknown> {
  switch (event.type) {
    case 'attempt':
      return { msg: 'attempt', key: event.key, attempt: event.attempt };
    case 'retry':
      return { msg: 'retry', key: event.key, attempt: event.attempt, error: event.error };
    case 'settled':
      return {
        msg: 'settled',
        key: event.intent.key,
        state: event.intent.state,
        // The attempt that got the final answer.
        attempt: event.intent.attempts,
        status: event.intent.answer?.status,
      };
    case 'expired':
      return { msg: 'expired', key: event.intent.key };
    case 'halted':
      return { msg: 'halted', reason: event.reason, detail: event.detail };
    case 'principal':
      return { msg: 'principal', principal: event.principalId };
  }
}

const accounts = env('FAILOVER_CLIENT_ACCOUNTS').split(',');
const transfers = Number(env('FAILOVER_CLIENT_TRANSFERS'));
const batch = Number(process.env['FAILOVER_CLIENT_BATCH'] ?? '20');
const stopFile = env('FAILOVER_CLIENT_STOP_FILE');
const index = Number(env('FAILOVER_CLIENT_INDEX'));
const deadline = Date.now() + Number(env('FAILOVER_CLIENT_DEADLINE_MS'));
const outbox = Outbox.open(env('FAILOVER_CLIENT_OUTBOX'));
/** How many transfers this outbox holds: the next one's number. */
let stated = outbox.list().length;

/** States `count` more transfers, numbered on from those already stated. */
function state(count: number): void {
  for (let n = 0; n < count; n += 1) {
    const i = stated + n;
    const from = (index + i) % accounts.length;
    const to = (from + 1 + (i % (accounts.length - 1))) % accounts.length;
    outbox.enqueue({
      operation: 'createTransfer',
      method: 'POST',
      path: '/api/v1/transfers',
      body: {
        from_account_id: accounts[from],
        to_account_id: accounts[to],
        amount: 1 + ((index * 7 + i * 13) % 100),
      },
      // Transfers out of one account go one after another, in order.
      lanes: [`account:${accounts[from] ?? ''}`],
    });
  }
  stated += count;
  line({ msg: 'stated', transfers: count });
}

try {
  if (stated === 0) state(transfers);
  else line({ msg: 'resumed', intents: stated, pending: outbox.pendingCount() });
  const sender = new Sender({
    outbox,
    baseUrl: env('FAILOVER_CLIENT_BASE_URL'),
    token: env('FAILOVER_CLIENT_TOKEN'),
    // The server's default sync.idempotency_key_ttl.
    keyTtlMs: 24 * 3_600_000,
    ttlMarginMs: 60_000,
    timeoutMs: 10_000,
    concurrency: 2,
    backoff: { baseMs: 50, capMs: 1_000, maxRetryAfterMs: 2_000 },
    onEvent: (event) => {
      line(describe(event));
    },
  });
  for (;;) {
    const report = await sender.drain({ deadline });
    if (report.pending !== 0 || existsSync(stopFile) || Date.now() >= deadline) {
      line({ msg: 'drained', pending: report.pending, stopped_by: report.stoppedBy, stated });
      if (report.pending !== 0) {
        process.stderr.write(`the drain stopped with ${String(report.pending)} intents pending\n`);
        process.exitCode = 1;
      }
      break;
    }
    state(batch);
  }
} finally {
  outbox.close();
}
