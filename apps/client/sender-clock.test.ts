/**
 * How old a key is, against a real HTTP server whose answers each test
 * scripts (sender-fixture.ts), with a manual clock: keys older than the
 * lifetime less the margin, a caller's own key, a clock stepped back, and
 * a server `Date` that is ahead, behind, absurd or missing.
 */
import t from 'tap';
import { newKey } from './outbox.js';
import { Sender } from './sender.js';
import { json, setup, START, transfer, type Reply } from './sender-fixture.js';

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
