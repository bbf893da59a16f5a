/**
 * The sender against a real HTTP server whose answers each test scripts
 * (node:http on 127.0.0.1, port 0), with a manual clock and a sleep that
 * advances it, so backoff and Retry-After are observed without waiting:
 * what is repeated with the same key and what is not, the order of lanes,
 * the principal check, expired keys, deadlines and aborts.
 */
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { outcome, resultLine } from './cli-output.js';
import { newKey, Outbox, type NewIntent } from './outbox.js';
import { Sender, type SendEvent, type SenderOptions } from './sender.js';

interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}
type Reply = (res: http.ServerResponse, seen: Seen) => void | Promise<void>;

/** A server answering POSTs from a script, GET /api/v1/me with a principal. */
async function scripted(
  t: Test,
  me: Reply = json(200, { id: 'p1', kind: 'user', display_name: 'P' }),
) {
  const seen: Seen[] = [];
  const script: Reply[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      // The tests' clock is not the machine's: a Date header only where a test sets one.
      res.sendDate = false;
      const s = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body };
      if (req.url === '/api/v1/me') {
        void me(res, s);
        return;
      }
      seen.push(s);
      const next = script.shift() ?? json(500, { code: 'internal_error' });
      void next(res, s);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  return { base: `http://127.0.0.1:${String(port)}`, seen, script, server };
}

/** The statuses the server stores under a key, and marks with Idempotent-Replay. */
const MARKED = new Set([200, 201, 204, 400, 403, 404, 409, 410, 412, 413, 415, 422]);

/**
 * An answer as the server gives it: a 2xx or stored status carries
 * `Idempotent-Replay: false` unless the headers say otherwise (the server
 * marks every answer it stores); see {@link unmarked} for one without.
 */
function json(
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
  mark = MARKED.has(status),
): (res: http.ServerResponse, seen?: Seen) => void {
  return (res) => {
    const problem = status >= 400;
    res.writeHead(status, {
      'content-type': problem
        ? 'application/problem+json; charset=utf-8'
        : 'application/json; charset=utf-8',
      ...(mark ? { 'idempotent-replay': 'false' } : {}),
      ...headers,
    });
    res.end(JSON.stringify(body));
  };
}

/** An answer without `Idempotent-Replay`: a gateway's, not the key's. */
function unmarked(status: number, body: unknown): (res: http.ServerResponse, seen?: Seen) => void {
  return json(status, body, {}, false);
}

async function outboxIn(t: Test, clock: () => number): Promise<Outbox> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-sender-'));
  const outbox = Outbox.open(path.join(dir, 'outbox.sqlite'), { clock });
  t.teardown(async () => {
    outbox.close();
    await fs.rm(dir, { recursive: true, force: true });
  });
  return outbox;
}

const START = Date.parse('2026-06-01T10:00:00Z');

async function setup(t: Test, me?: Reply, extra: Partial<SenderOptions> = {}) {
  const server = await scripted(t, me);
  const clock = { now: START };
  const outbox = await outboxIn(t, () => clock.now);
  const events: SendEvent[] = [];
  const sleeps: number[] = [];
  const sender = new Sender({
    outbox,
    baseUrl: server.base,
    token: 'tok',
    keyTtlMs: 24 * 3_600_000,
    ttlMarginMs: 3_600_000,
    timeoutMs: 2_000,
    concurrency: 4,
    backoff: { baseMs: 100, capMs: 10_000, maxRetryAfterMs: 60_000 },
    clock: () => clock.now,
    random: () => 0.5,
    sleep: async (ms) => {
      sleeps.push(ms);
      clock.now += ms;
      await Promise.resolve();
    },
    onEvent: (e) => events.push(e),
    ...extra,
  });
  return { ...server, clock, outbox, events, sleeps, sender };
}

const transfer = (amount: number, lanes = ['account:a', 'account:b']): NewIntent => ({
  operation: 'createTransfer',
  method: 'POST',
  path: '/api/v1/transfers',
  body: { from_account_id: 'a', to_account_id: 'b', amount },
  lanes,
});

void t.test(
  '503, a lost connection and a timeout are repeated with the same key and bytes',
  async (t) => {
    const s = await setup(t);
    const { intent } = s.outbox.enqueue(transfer(2500));
    s.script.push(
      json(503, { code: 'service_unavailable' }),
      (res) => {
        res.socket?.destroy();
      },
      () => {
        // never answers: the attempt times out
      },
      json(
        201,
        { id: 't1', amount: 2500 },
        { location: '/api/v1/transfers/t1', 'idempotent-replay': 'true' },
      ),
    );
    const report = await s.sender.drain();
    t.equal(report.stoppedBy, 'empty');
    t.equal(report.pending, 0);
    t.equal(s.seen.length, 4, 'four attempts');
    t.ok(
      s.seen.every(
        (x) =>
          x.headers['idempotency-key'] === intent.key &&
          x.body === '{"amount":2500,"from_account_id":"a","to_account_id":"b"}' &&
          x.headers['authorization'] === 'Bearer tok' &&
          x.headers['content-type'] === 'application/json' &&
          x.method === 'POST' &&
          x.url === '/api/v1/transfers',
      ),
      'every attempt carries the same key, body and token',
    );
    const retries = s.events.filter((e) => e.type === 'retry');
    t.same(
      retries.map((e) => e.error.split(':')[0]),
      ['503 service_unavailable', 'connection lost', 'timeout after 2000ms'],
    );
    t.same(s.sleeps, [75, 150, 300], 'exponential steps with equal jitter at random 0.5');
    const done = s.outbox.get(intent.key);
    t.match(done, {
      state: 'done',
      attempts: 4,
      failure: null,
      answer: { status: 201, replayed: true, headers: { location: '/api/v1/transfers/t1' } },
    });
    t.equal(done?.answer?.body, '{"id":"t1","amount":2500}', 'the answer is kept as received');
    t.same(
      report.settled.map((i) => i.key),
      [intent.key],
    );
    t.equal(s.outbox.principal(), 'p1', 'the outbox is bound to the principal of the token');
  },
);

void t.test(
  '409 in progress and 429 wait what Retry-After asks, then the replay is final',
  async (t) => {
    const s = await setup(t);
    const { intent } = s.outbox.enqueue(transfer(1));
    s.script.push(
      json(409, { code: 'request_in_progress' }, { 'retry-after': '1' }),
      json(429, { code: 'rate_limited' }, { 'retry-after': '3' }),
      json(201, { id: 't' }, { 'idempotent-replay': 'true' }),
    );
    await s.sender.drain();
    t.same(s.sleeps, [1_000, 3_000]);
    t.match(s.outbox.get(intent.key), { state: 'done', attempts: 3, answer: { replayed: true } });
  },
);

void t.test(
  'a stored 4xx is final; 422 key reuse and an unexpected answer fail, never repeated',
  async (t) => {
    const s = await setup(t);
    const a = s.outbox.enqueue(transfer(1, ['1'])).intent;
    const b = s.outbox.enqueue(transfer(2, ['1'])).intent;
    const c = s.outbox.enqueue(transfer(3, ['1'])).intent;
    s.script.push(
      json(404, { code: 'not_found' }),
      json(422, { code: 'idempotency_key_reuse' }),
      json(405, { code: 'method_not_allowed' }),
    );
    const report = await s.sender.drain();
    t.equal(s.seen.length, 3, 'one attempt each');
    t.same(
      s.seen.map((x) => x.headers['idempotency-key']),
      [a.key, b.key, c.key],
      'sent in the order stated, each with its own key',
    );
    t.match(s.outbox.get(a.key), { state: 'done', failure: null, answer: { status: 404 } });
    t.match(s.outbox.get(b.key), {
      state: 'failed',
      failure: 'key_reuse',
      answer: { status: 422 },
    });
    t.match(s.outbox.get(c.key), {
      state: 'failed',
      failure: 'unexpected_answer',
      answer: { status: 405 },
    });
    t.same(
      report.settled.map((i) => i.state),
      ['done', 'failed', 'failed'],
    );
    t.equal(s.outbox.list().length, 3, 'no new intent, no new key');
  },
);

void t.test('one intent at a time per lane; other lanes go at once', async (t) => {
  const s = await setup(t);
  const first = s.outbox.enqueue(transfer(1, ['account:a', 'account:b'])).intent;
  const second = s.outbox.enqueue(transfer(2, ['account:b', 'account:c'])).intent;
  const other = s.outbox.enqueue(transfer(3, ['account:x'])).intent;
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let arrived!: () => void;
  const bothArrived = new Promise<void>((r) => (arrived = r));
  let count = 0;
  const hold: Reply = async (res) => {
    count += 1;
    if (count === 2) arrived();
    await held;
    json(201, { id: 'x' })(res);
  };
  s.script.push(hold, hold, json(201, { id: 'y' }));
  const draining = s.sender.drain();
  await bothArrived;
  t.same(
    s.seen.map((x) => x.headers['idempotency-key']),
    [first.key, other.key],
    'the head of each lane is in flight; the second of lane b waits',
  );
  release();
  const report = await draining;
  t.same(
    s.seen.map((x) => x.headers['idempotency-key']),
    [first.key, other.key, second.key],
  );
  t.equal(report.settled.length, 3);
});

void t.test('401 halts the drain and keeps the intents for a good token', async (t) => {
  const s = await setup(t);
  const { intent } = s.outbox.enqueue(transfer(1));
  s.outbox.enqueue(transfer(2));
  s.script.push(json(401, { code: 'unauthenticated' }));
  const report = await s.sender.drain();
  t.equal(report.stoppedBy, 'unauthenticated');
  t.equal(report.pending, 2);
  t.equal(s.seen.length, 1, 'nothing more is sent');
  t.match(s.outbox.get(intent.key), {
    state: 'pending',
    attempts: 1,
    lastError: '401 unauthenticated',
  });
  t.match(s.events.at(-1), { type: 'halted', reason: 'unauthenticated' });
});

void t.test('the principal check: a 401, retries, another principal, an odd answer', async (t) => {
  const refused = await setup(t, json(401, { code: 'unauthenticated' }));
  refused.outbox.enqueue(transfer(1));
  t.match(await refused.sender.drain(), { stoppedBy: 'unauthenticated', pending: 1 });
  t.equal(refused.seen.length, 0, 'no write is sent before the principal is known');

  let calls = 0;
  const flaky = await setup(t, (res, seen) => {
    calls += 1;
    if (calls === 1) json(503, { code: 'service_unavailable' }, { 'retry-after': '2' })(res, seen);
    else json(200, { id: 'p1' })(res, seen);
  });
  flaky.outbox.enqueue(transfer(1));
  flaky.script.push(json(201, { id: 't' }));
  t.match(await flaky.sender.drain(), { stoppedBy: 'empty' });
  t.same(flaky.sleeps, [2_000]);
  t.match(flaky.events[0], { type: 'retry', operation: 'getMe', error: '503 service_unavailable' });

  const other = await setup(t, json(200, { id: 'p2' }));
  other.outbox.bindPrincipal('p1');
  other.outbox.enqueue(transfer(1));
  await t.rejects(other.sender.drain(), { name: 'OutboxPrincipalError' });
  t.equal(other.seen.length, 0);

  const odd = await setup(t, json(404, { code: 'not_found' }));
  odd.outbox.enqueue(transfer(1));
  t.match(await odd.sender.drain(), {
    stoppedBy: 'unexpected_answer',
    halt: /GET \/api\/v1\/me answered 404/,
  });

  const empty = await setup(t, json(500, {}));
  t.match(
    await empty.sender.drain(),
    { stoppedBy: 'empty', pending: 0 },
    'nothing pending: no call',
  );
});

void t.test('a key older than the TTL less the margin is reported, not sent', async (t) => {
  const s = await setup(t);
  const old = s.outbox.enqueue(transfer(1)).intent;
  s.clock.now += 23 * 3_600_000; // 24h TTL less 1h margin
  const fresh = s.outbox.enqueue(transfer(2)).intent;
  s.script.push(json(201, { id: 't' }));
  const report = await s.sender.drain();
  t.same(
    s.seen.map((x) => x.headers['idempotency-key']),
    [fresh.key],
    'only the fresh one is sent',
  );
  t.match(s.outbox.get(old.key), { state: 'failed', failure: 'expired', answer: null });
  t.match(
    s.events.find((e) => e.type === 'expired'),
    { type: 'expired', ageMs: 23 * 3_600_000 },
  );
  t.same(
    report.settled.map((i) => i.failure),
    ['expired', null],
  );

  // Expiry also ends the repeats of an intent that never got an answer.
  const late = await setup(t, undefined, {
    backoff: { baseMs: 100, capMs: 10_000, maxRetryAfterMs: 3_600_000 },
  });
  const { intent } = late.outbox.enqueue(transfer(3));
  for (let i = 0; i < 40; i += 1)
    late.script.push(json(503, { code: 'service_unavailable' }, { 'retry-after': '3600' }));
  await late.sender.drain();
  t.equal(late.seen.length, 23, 'one attempt an hour until the key is 23 hours old');
  t.match(late.outbox.get(intent.key), { state: 'failed', failure: 'expired', attempts: 23 });
});

void t.test('a deadline, a target and an abort end the drain with the rest kept', async (t) => {
  const s = await setup(t);
  const { intent } = s.outbox.enqueue(transfer(1));
  for (let i = 0; i < 10; i += 1)
    s.script.push(json(503, { code: 'service_unavailable' }, { 'retry-after': '1' }));
  const report = await s.sender.drain({ deadline: START + 2_500 });
  t.equal(report.stoppedBy, 'deadline');
  t.equal(report.pending, 1);
  t.equal(s.seen.length, 3, 'attempts at 0, 1 and 2 seconds');
  t.match(s.outbox.get(intent.key), { state: 'pending', attempts: 3 });

  const target = await setup(t);
  const first = target.outbox.enqueue(transfer(1, ['a'])).intent;
  target.outbox.enqueue(transfer(2, ['b']));
  const byAmount: Reply = (res, seen) => {
    const amount = (JSON.parse(seen.body) as { amount: number }).amount;
    json(amount === 1 ? 201 : 503, { id: 't' })(res, seen);
  };
  target.script.push(byAmount, byAmount, byAmount, byAmount);
  const r = await target.sender.drain({ target: first.key });
  t.equal(r.stoppedBy, 'target');
  t.match(target.outbox.get(first.key), { state: 'done' });

  const ctrl = new AbortController();
  const aborted = await setup(t, undefined, {
    sleep: (ms, signal) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, ms);
        signal.addEventListener('abort', () => {
          clearTimeout(timer);
          reject(signal.reason as Error);
        });
      }),
  });
  const held = aborted.outbox.enqueue(transfer(1)).intent;
  aborted.script.push(() => {
    ctrl.abort();
  });
  const a = await aborted.sender.drain({ signal: ctrl.signal });
  t.equal(a.stoppedBy, 'aborted');
  t.match(
    aborted.outbox.get(held.key),
    { state: 'pending', attempts: 1, attemptStartedAt: null, lastError: /^interrupted/ },
    'an aborted attempt counts: its bytes may have left',
  );
  const again = await aborted.sender.drain({ signal: ctrl.signal });
  t.equal(again.stoppedBy, 'aborted', 'an aborted signal sends nothing');
  t.equal(aborted.seen.length, 1);
});

void t.test('options are checked when the sender is made', async (t) => {
  const s = await setup(t);
  const base = {
    outbox: s.outbox,
    baseUrl: s.base,
    token: 'tok',
    keyTtlMs: 10_000,
    ttlMarginMs: 5_000,
    timeoutMs: 1_000,
    concurrency: 1,
    backoff: { baseMs: 1, capMs: 1, maxRetryAfterMs: 1 },
  };
  t.throws(() => new Sender({ ...base, ttlMarginMs: 10_000 }), /ttlMarginMs.*keyTtlMs/);
  t.throws(() => new Sender({ ...base, timeoutMs: 5_000 }), /timeoutMs.*ttlMarginMs/);
  t.throws(() => new Sender({ ...base, concurrency: 0 }), /concurrency/);
  t.throws(() => new Sender({ ...base, baseUrl: 'ftp://x' }), /baseUrl/);
  t.throws(() => new Sender({ ...base, baseUrl: 'http://x/api' }), /baseUrl/);
  t.throws(() => new Sender({ ...base, token: '' }), /token/);
});

void t.test('two drains at once send each intent once and both end well', async (t) => {
  const s = await setup(t);
  const one = s.outbox.enqueue(transfer(1, ['account:a'])).intent;
  const two = s.outbox.enqueue(transfer(2, ['account:b'])).intent;
  const slow: Reply = async (res) => {
    await new Promise((resolve) => setTimeout(resolve, 30));
    json(201, { id: 'x' })(res);
  };
  s.script.push(slow, slow, slow, slow);
  const [a, b] = await Promise.all([
    s.sender.drain({ target: one.key }),
    s.sender.drain({ target: two.key }),
  ]);
  t.ok(a.stoppedBy === 'target' || a.stoppedBy === 'empty', `first: ${a.stoppedBy}`);
  t.ok(b.stoppedBy === 'target' || b.stoppedBy === 'empty', `second: ${b.stoppedBy}`);
  t.same(
    s.seen.map((x) => x.headers['idempotency-key']).sort(),
    [one.key, two.key].sort(),
    'each key sent once',
  );
  t.same(
    s.outbox.list().map((i) => i.state),
    ['done', 'done'],
  );
});

void t.test("a caller's key ages from its own time when that is earlier", async (t) => {
  const s = await setup(t);
  // A key the caller made 30 hours ago (sent then from elsewhere, perhaps),
  // stated only now: the server may have forgotten it.
  const key = newKey(() => s.clock.now - 30 * 3_600_000);
  const stated = s.outbox.enqueue({ ...transfer(1), key }).intent;
  const fresh = s.outbox.enqueue({
    ...transfer(2, ['account:c']),
    key: newKey(() => s.clock.now),
  }).intent;
  s.script.push(json(201, { id: 't' }));
  await s.sender.drain();
  t.same(
    s.seen.map((x) => x.headers['idempotency-key']),
    [fresh.key],
    'the old key is not sent',
  );
  t.match(s.outbox.get(stated.key), { state: 'failed', failure: 'expired' });
  // A key stamped in the future ages from when it was stated.
  const later = s.outbox.enqueue({
    ...transfer(3, ['account:d']),
    key: newKey(() => s.clock.now + 48 * 3_600_000),
  }).intent;
  s.script.push(json(201, { id: 'u' }));
  await s.sender.drain();
  t.match(s.outbox.get(later.key), { state: 'done' });
});

void t.test('an attempt is recorded before its request is sent', async (t) => {
  const s = await setup(t);
  const { intent } = s.outbox.enqueue(transfer(1));
  const during: unknown[] = [];
  s.script.push(
    (res) => {
      during.push(s.outbox.get(intent.key));
      json(503, { code: 'service_unavailable' })(res);
    },
    (res) => {
      during.push(s.outbox.get(intent.key));
      json(201, { id: 't' }, { 'idempotent-replay': 'false' })(res);
    },
  );
  await s.sender.drain();
  t.match(
    during,
    [
      { state: 'pending', attempts: 1, attemptStartedAt: START },
      { state: 'pending', attempts: 2, attemptStartedAt: START + 75 },
    ],
    'while the server holds a request, the outbox counts it, with its start',
  );
  t.match(s.outbox.get(intent.key), { state: 'done', attempts: 2, attemptStartedAt: null });
});

void t.test(
  'an unmarked stored status is repeated once, then outcome_unknown, never done',
  async (t) => {
    // Changed: an unmarked answer is never final, not even
    // on the first attempt (a response-side gateway may have replaced a
    // committed 201), nor a 2xx; it is repeated once with the same key, and
    // a second unmarked answer in a row is outcome_unknown. Before, the
    // 403 on a first attempt below was recorded done, and the unmarked 201
    // done too.
    const s = await setup(t);
    const lost = s.outbox.enqueue(transfer(1, ['1'])).intent;
    const first = s.outbox.enqueue(transfer(2, ['2'])).intent;
    const marked = s.outbox.enqueue(transfer(3, ['3'])).intent;
    const ok = s.outbox.enqueue(transfer(4, ['4'])).intent;
    const byAmount = new Map<number, Reply[]>([
      // The first attempt is lost on the way back; the repeats meet a gateway.
      [
        1,
        [
          (res) => {
            res.socket?.destroy();
          },
          unmarked(404, { code: 'not_found' }),
          unmarked(404, { code: 'not_found' }),
        ],
      ],
      // The first attempt is refused before the API, and the repeat too.
      [2, [unmarked(403, { code: 'forbidden' }), unmarked(403, { code: 'forbidden' })]],
      // A 503, then the key's own first answer.
      [3, [json(503, {}), json(409, { code: 'conflict' }, { 'idempotent-replay': 'false' })]],
      // An unmarked 2xx is repeated; the repeat gets the key's stored answer.
      [
        4,
        [
          json(503, {}),
          unmarked(201, { id: 't' }),
          json(201, { id: 't' }, { 'idempotent-replay': 'true' }),
        ],
      ],
    ]);
    const reply: Reply = (res, seen) => {
      const amount = (JSON.parse(seen.body) as { amount: number }).amount;
      const next = byAmount.get(amount)?.shift() ?? json(500, {});
      return next(res, seen);
    };
    for (let i = 0; i < 10; i += 1) s.script.push(reply);
    const report = await s.sender.drain();
    t.equal(report.stoppedBy, 'empty');
    t.equal(s.seen.length, 10, 'nothing is repeated after its final state');
    t.match(s.outbox.get(lost.key), {
      state: 'failed',
      failure: 'outcome_unknown',
      attempts: 3,
      answer: { status: 404, replayed: false, marked: false, body: '{"code":"not_found"}' },
    });
    t.match(s.outbox.get(first.key), {
      state: 'failed',
      failure: 'outcome_unknown',
      attempts: 2,
      answer: { status: 403, marked: false },
    });
    t.match(s.outbox.get(marked.key), {
      state: 'done',
      attempts: 2,
      answer: { status: 409, replayed: false, marked: true },
    });
    t.match(s.outbox.get(ok.key), {
      state: 'done',
      attempts: 3,
      answer: { status: 201, marked: true, replayed: true },
    });
    t.match(
      s.events.find((e) => e.type === 'settled' && e.intent.key === lost.key),
      { intent: { failure: 'outcome_unknown' } },
    );
  },
);

void t.test(
  'after an attempt cut off by a crash, unmarked refusals end in outcome_unknown',
  async (t) => {
    // The server's Date is read before a key sent by an earlier process is
    // sent again.
    const s = await setup(t, json(200, { id: 'p1' }, { date: new Date(START).toUTCString() }));
    const { intent } = s.outbox.enqueue(transfer(1));
    // A process that died during its attempt left this behind.
    s.outbox.recordAttempt(intent.seq, 1, START);
    s.script.push(
      unmarked(413, { code: 'payload_too_large' }),
      unmarked(413, { code: 'payload_too_large' }),
    );
    await s.sender.drain();
    t.match(s.outbox.get(intent.key), {
      state: 'failed',
      failure: 'outcome_unknown',
      attempts: 3,
      answer: { status: 413 },
    });
  },
);

void t.test('a clock stepped back does not make an old key look young', async (t) => {
  const s = await setup(t);
  const old = s.outbox.enqueue(transfer(1, ['1'])).intent;
  s.clock.now = START + 23.5 * 3_600_000;
  const fresh = s.outbox.enqueue(transfer(2, ['2'])).intent;
  // Stepped back by 2 hours, more than the 1 hour margin: by this clock
  // the old key is 21.5 hours old, yet 23.5 hours have passed.
  s.clock.now = START + 21.5 * 3_600_000;
  s.script.push(json(201, { id: 't' }));
  const report = await s.sender.drain();
  t.same(
    s.seen.map((x) => x.headers['idempotency-key']),
    [fresh.key],
    'only the fresh key is sent',
  );
  t.match(s.outbox.get(old.key), { state: 'failed', failure: 'expired', attempts: 0 });
  t.match(
    s.events.find((e) => e.type === 'expired'),
    { ageMs: 23.5 * 3_600_000 },
    'its age counts from the latest time the outbox recorded',
  );
  t.same(
    report.settled.map((i) => [i.key, i.state]),
    [
      [old.key, 'failed'],
      [fresh.key, 'done'],
    ],
  );
});

void t.test('the server Date of an answer is a time the key has reached', async (t) => {
  const s = await setup(t);
  const { intent } = s.outbox.enqueue(transfer(1));
  // The clock says 22.5 hours have passed; the server, 45 minutes later
  // (within the margin: a Date further ahead is not believed), says 23.25.
  s.clock.now = START + 22.5 * 3_600_000;
  const later = new Date(START + 23.25 * 3_600_000).toUTCString();
  s.script.push(json(503, { code: 'service_unavailable' }, { date: later }), json(201, {}));
  await s.sender.drain();
  t.equal(s.seen.length, 1, 'not sent again once the server said 23.25 hours have passed');
  t.match(s.outbox.get(intent.key), { state: 'failed', failure: 'expired', attempts: 1 });
  t.equal(s.outbox.highWater(), START + 23.25 * 3_600_000);
});

void t.test(
  'a key stated while the client clock was ahead is not sent while the clocks disagree',
  async (t) => {
    let serverNow = START;
    const me: Reply = (res, seen) => {
      json(200, { id: 'p1' }, { date: new Date(serverNow).toUTCString() })(res, seen);
    };
    const s = await setup(t, me);
    // The client clock is 3 hours ahead when the intent is stated and first sent.
    s.clock.now = START + 3 * 3_600_000;
    const { intent } = s.outbox.enqueue(transfer(1));
    s.script.push((res) => {
      res.socket?.destroy();
    });
    const first = await s.sender.drain({ deadline: s.clock.now + 10 });
    // The server's Date is 3 hours behind: more than the margin, so nothing
    // is sent while the clocks disagree, and no key leaves whose age
    // the two clocks would tell apart.
    t.equal(first.stoppedBy, 'clock_disagreement');
    t.equal(s.seen.filter((x) => x.method === 'POST').length, 0, 'no attempt left');
    s.script.shift();
    // 25 hours later the clock is corrected: the key never left, so its
    // first attempt runs it once.
    s.clock.now = START + 25 * 3_600_000;
    serverNow = START + 25 * 3_600_000;
    const later = new Sender({
      outbox: s.outbox,
      baseUrl: s.base,
      token: 'tok',
      keyTtlMs: 24 * 3_600_000,
      ttlMarginMs: 3_600_000,
      timeoutMs: 2_000,
      concurrency: 4,
      backoff: { baseMs: 100, capMs: 10_000, maxRetryAfterMs: 60_000 },
      clock: () => s.clock.now,
      random: () => 0.5,
      sleep: async () => {},
      onEvent: (e) => s.events.push(e),
    });
    s.script.push(json(201, { id: 't' }, { 'idempotent-replay': 'false' }));
    await later.drain();
    t.equal(s.seen.filter((x) => x.method === 'POST').length, 1, 'one POST, the first');
    t.match(s.outbox.get(intent.key), { state: 'done', attempts: 1 });
  },
);

void t.test(
  'a server Date far in the future neither raises the mark nor expires anything: the drain halts until it is sane',
  async (t) => {
    let date = 'Fri, 31 Dec 9999 23:59:59 GMT';
    const s = await setup(t, (res, seen) => {
      json(200, { id: 'p1' }, { date })(res, seen);
    });
    const { intent } = s.outbox.enqueue(transfer(1));
    const halted = await s.sender.drain();
    t.equal(halted.stoppedBy, 'clock_disagreement', 'one of the clocks is wrong: nothing is sent');
    t.equal(s.seen.filter((x) => x.method === 'POST').length, 0);
    t.match(s.outbox.get(intent.key), { state: 'pending', failure: null }, 'not expired');
    t.ok(
      s.outbox.highWater() <= s.clock.now + 3_600_000,
      `the mark is at most the local time plus the margin: ${String(s.outbox.highWater())}`,
    );
    // The gateway sends a sane Date again: the intent goes, and an absurd
    // Date on its answer does not raise the mark either.
    date = new Date(s.clock.now).toUTCString();
    s.script.push(
      json(
        201,
        { id: 't' },
        { 'idempotent-replay': 'false', date: 'Fri, 31 Dec 9999 23:59:59 GMT' },
      ),
    );
    await s.sender.drain();
    t.match(s.outbox.get(intent.key), { state: 'done', answer: { status: 201 } });
    t.ok(s.outbox.highWater() <= s.clock.now + 3_600_000, 'nor does a POST answer raise it');
  },
);

void t.test(
  'an unmarked answer, 2xx included, is repeated once; a second one is outcome_unknown',
  async (t) => {
    const s = await setup(t);
    const settles = s.outbox.enqueue(transfer(1, ['1'])).intent;
    const twice = s.outbox.enqueue(transfer(2, ['2'])).intent;
    const refused = s.outbox.enqueue(transfer(3, ['3'])).intent;
    const byAmount = new Map<number, Reply[]>([
      // A gateway replaced the answer; the repeat gets the key's stored one.
      [1, [unmarked(201, { id: 'gw' }), json(201, { id: 't1' }, { 'idempotent-replay': 'true' })]],
      // Unmarked twice in a row: whether it took effect is not known.
      [2, [unmarked(201, { id: 'gw' }), unmarked(201, { id: 'gw' })]],
      // An unmarked refusal on the first attempt is not certain either.
      [
        3,
        [
          unmarked(403, { code: 'forbidden' }),
          json(409, { code: 'conflict' }, { 'idempotent-replay': 'false' }),
        ],
      ],
    ]);
    const reply: Reply = (res, seen) => {
      const amount = (JSON.parse(seen.body) as { amount: number }).amount;
      const next = byAmount.get(amount)?.shift() ?? json(500, {});
      return next(res, seen);
    };
    for (let i = 0; i < 6; i += 1) s.script.push(reply);
    await s.sender.drain();
    t.equal(s.seen.length, 6, 'each repeated once, with its key');
    t.same(s.seen.filter((x) => x.headers['idempotency-key'] === settles.key).length, 2);
    t.match(s.outbox.get(settles.key), {
      state: 'done',
      attempts: 2,
      answer: { status: 201, marked: true, replayed: true, body: '{"id":"t1"}' },
    });
    t.match(s.outbox.get(twice.key), {
      state: 'failed',
      failure: 'outcome_unknown',
      attempts: 2,
      answer: { status: 201, marked: false },
    });
    t.match(s.outbox.get(refused.key), {
      state: 'done',
      attempts: 2,
      answer: { status: 409, marked: true },
    });
  },
);

void t.test(
  'an answer body over 1 MiB is not read whole, and is classified by its status and marker first',
  async (t) => {
    // Changed: an oversize answer was failed before it was
    // classified (unexpected_answer on a first attempt), so a 503 was not
    // retried and the committed 201 was failed.
    const s = await setup(t);
    const intents = [1, 2, 3, 4, 5].map((n) => s.outbox.enqueue(transfer(n, [String(n)])).intent);
    const huge =
      (status: number, marked = true): Reply =>
      (res) => {
        res.writeHead(status, {
          'content-type': 'application/json',
          ...(marked ? { 'idempotent-replay': 'false' } : {}),
        });
        res.end(`"${'x'.repeat(1024 * 1024)}"`);
      };
    const byAmount = new Map<number, Reply[]>([
      // The key's committed answer, marked: done, its body not kept.
      [1, [huge(201)]],
      // A retryable status is retried whatever its body.
      [2, [huge(503, false), json(201, { id: 't2' })]],
      // 409 request_in_progress cannot be told from a conflict without its body.
      [3, [huge(409)]],
      // Any other oversize answer may hide the committed one.
      [4, [huge(404)]],
      [5, [huge(201, false)]],
    ]);
    const reply: Reply = (res, seen) => {
      const amount = (JSON.parse(seen.body) as { amount: number }).amount;
      const next = byAmount.get(amount)?.shift() ?? json(500, {});
      return next(res, seen);
    };
    for (let i = 0; i < 6; i += 1) s.script.push(reply);
    await s.sender.drain();
    t.equal(s.seen.length, 6);
    const [done, retried, conflict, refused, unmarkedBig] = intents.map((i) => s.outbox.get(i.key));
    t.match(done, {
      state: 'done',
      failure: null,
      attempts: 1,
      answer: { status: 201, marked: true, body: '' },
      lastError: /over 1048576 bytes, not kept/,
    });
    t.match(retried, { state: 'done', attempts: 2, answer: { status: 201, body: '{"id":"t2"}' } });
    t.match(retried?.lastError, /^503/);
    for (const [name, intent, status] of [
      ['409', conflict, 409],
      ['404', refused, 404],
      ['unmarked 201', unmarkedBig, 201],
    ] as const) {
      t.match(
        intent,
        { state: 'failed', failure: 'outcome_unknown', attempts: 1, answer: { status, body: '' } },
        name,
      );
    }
    if (done !== undefined && refused !== undefined) {
      t.match(resultLine(done, false), /: 201, the key.s answer, its body over 1 MiB not kept$/);
      t.match(outcome(refused), /^outcome unknown: 404 with a body over 1 MiB, not read/);
    }
  },
);

void t.test(
  'a server Date far from the local clock holds every intent, attempted or not',
  async (t) => {
    const H = 3_600_000;
    let serverNow = START + 24 * H + 10 * 60_000;
    const s = await setup(t, (res, seen) => {
      json(200, { id: 'p1' }, { date: new Date(serverNow).toUTCString() })(res, seen);
    });
    // At START a transfer was sent and committed; its process was killed
    // before the answer, leaving one attempt and the server time behind.
    const sent = s.outbox.enqueue(transfer(1, ['1'])).intent;
    s.outbox.recordAttempt(sent.seq, 1, START, START);
    // The client clock then stepped back 2 hours (more than the 1 hour
    // margin). At the real START + 24h10m the clock says START + 22h10m.
    s.clock.now = START + 22 * H + 10 * 60_000;
    // An intent with no attempt in this outbox may still have been sent: a
    // restored snapshot of the outbox, or a key the caller sent before.
    const fresh = s.outbox.enqueue(transfer(2, ['2'])).intent;
    s.script.push(json(201, { id: 't2' }));
    const report = await s.sender.drain();
    t.same(
      s.seen.filter((x) => x.method === 'POST'),
      [],
      'no intent sent, attempted or not, while the clocks disagree',
    );
    t.match(s.outbox.get(sent.key), { state: 'pending', attempts: 1, failure: null });
    t.match(s.outbox.get(fresh.key), { state: 'pending', attempts: 0, failure: null });
    t.equal(report.stoppedBy, 'clock_disagreement');
    t.match(report.halt, /2026-06-02T10:10:00\.000Z/, 'the halt names the server time');
    t.match(report.halt, /2026-06-02T08:10:00\.000Z/, 'and the local time');
    t.match(
      s.events.filter((e) => e.type === 'halted'),
      [{ reason: 'clock_disagreement' }],
    );
    t.equal(s.events.filter((e) => e.type === 'halted').length, 1);

    // The server behind the local clock by more than the margin holds it too.
    serverNow = s.clock.now - 2 * H;
    const behind = await s.sender.drain();
    t.equal(s.seen.filter((x) => x.method === 'POST').length, 0, 'still not sent');
    t.equal(behind.stoppedBy, 'clock_disagreement');

    // Once the clock is fixed the drain goes on as usual: the attempted key
    // is 24h10m old, so it is expired, not sent; the fresh one is sent.
    s.clock.now = serverNow = START + 24 * H + 10 * 60_000;
    const fixed = await s.sender.drain();
    t.equal(fixed.stoppedBy, 'empty');
    t.same(
      s.seen.filter((x) => x.method === 'POST').map((x) => x.headers['idempotency-key']),
      [fresh.key],
      'the attempted key never sent again; the fresh one sent once',
    );
    t.match(s.outbox.get(sent.key), { state: 'failed', failure: 'expired', attempts: 1 });
    t.match(s.outbox.get(fresh.key), { state: 'done' });
  },
);

void t.test(
  'a drain whose server sent no readable Date holds every intent with an attempt behind it',
  async (t) => {
    // GET /api/v1/me answers without Date (a gateway that drops it): the
    // age of a key sent before cannot be checked on the server clock.
    const s = await setup(t, json(200, { id: 'p1' }));
    const sent = s.outbox.enqueue(transfer(1, ['1'])).intent;
    s.outbox.recordAttempt(sent.seq, 1, START, START);
    const fresh = s.outbox.enqueue(transfer(2, ['2'])).intent;
    s.script.push(json(201, { id: 't2' }));
    const report = await s.sender.drain();
    t.same(
      s.seen.filter((x) => x.method === 'POST').map((x) => x.headers['idempotency-key']),
      [fresh.key],
      'the intent never attempted is sent; the attempted one is held',
    );
    t.match(s.outbox.get(sent.key), { state: 'pending', attempts: 1 });
    t.equal(report.stoppedBy, 'clock_disagreement');
    t.match(report.halt, /no readable Date/);
  },
);

void t.test('a server Date far ahead of the local clock stops a repeat of the key', async (t) => {
  // The local clock far behind the server. The
  // answer's Date says 23.5 hours have passed, the clock says none; the
  // repeat is not sent, whichever clock is right.
  const s = await setup(t);
  const { intent } = s.outbox.enqueue(transfer(1));
  const later = new Date(START + 23.5 * 3_600_000).toUTCString();
  s.script.push(json(503, { code: 'service_unavailable' }, { date: later }), json(201, {}));
  const report = await s.sender.drain();
  t.equal(s.seen.length, 1, 'not sent again once the server said 23.5 hours have passed');
  t.match(s.outbox.get(intent.key), { state: 'pending', attempts: 1 });
  t.equal(report.stoppedBy, 'clock_disagreement');
  t.match(report.halt, /2026-06-02T09:30:00\.000Z/);
});

void t.test(
  'a path that resolves to another origin is never sent, nor the token with it',
  async (t) => {
    const s = await setup(t);
    const other = await scripted(t);
    const { intent } = s.outbox.enqueue(transfer(1));
    // A row the outbox would refuse, as a sender fed by another source
    // might still meet: tab, CR and LF are dropped by the URL parser.
    const hostPort = new URL(other.base).host;
    const ready = s.outbox.ready.bind(s.outbox);
    s.outbox.ready = (...args) =>
      ready(...args).map((i) => ({ ...i, path: `/\t/${hostPort}/api/v1/transfers` }));
    await t.rejects(s.sender.drain(), {
      name: 'OutboxCorruptError',
      message: /another origin/,
    });
    t.equal(other.seen.length, 0, 'the other origin got nothing');
    t.equal(s.seen.length, 0, 'nor did the origin');
    t.match(s.outbox.get(intent.key), { state: 'pending', attempts: 0, attemptStartedAt: null });
  },
);
