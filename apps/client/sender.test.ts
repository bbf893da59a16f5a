/**
 * The sender's drain against a real HTTP server whose answers each test
 * scripts (sender-fixture.ts), with a manual clock and a sleep that
 * advances it: the order of lanes, a 401 that halts, the principal check,
 * deadlines, targets and aborts, the options, two drains at once, and a
 * path that would leave the origin.
 */
import t from 'tap';
import { Sender } from './sender.js';
import { json, scripted, setup, START, transfer, type Reply } from './sender-fixture.js';

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
