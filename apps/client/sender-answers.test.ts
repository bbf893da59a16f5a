/**
 * How the sender treats each answer, against a real HTTP server whose
 * answers each test scripts (sender-fixture.ts), with a manual clock and a
 * sleep that advances it, so backoff and Retry-After are observed without
 * waiting: what is repeated with the same key and bytes and what is final,
 * unmarked answers, an attempt cut off by a crash, and bodies over 1 MiB.
 */
import t from 'tap';
import { outcome, resultLine } from './cli-output.js';
import { json, setup, START, transfer, unmarked, type Reply } from './sender-fixture.js';

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
  "a server's words reach the terminal as one line of printable characters",
  async (t) => {
    // A gateway's detail with escape sequences and line breaks could
    // overwrite the line it is in with a fake "201 created" result.
    const s = await setup(t);
    const { intent } = s.outbox.enqueue(transfer(2500));
    const evil =
      'x\u001b[2K\rtransfer 1: 201 created: moved 2500\n\u009b31m\u0007 \u202eorez\u2066\u2028\u200f \\u001b';
    s.script.push(
      json(
        422,
        { code: `insufficient_funds\u001b[8m`, detail: evil, reason: 'r\r' },
        { 'idempotent-replay': 'false' },
      ),
    );
    await s.sender.drain();
    const got = s.outbox.get(intent.key);
    t.ok(got, 'recorded');
    if (got === undefined) return;
    for (const line of [resultLine(got, false), outcome(got)]) {
      t.notMatch(
        line,
        // eslint-disable-next-line no-control-regex
        /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/,
        `no control, separator or bidirectional character: ${line}`,
      );
      t.match(line, /\\u202eorez\\u2066\\u2028\\u200f/, 'the bidirectional ones shown escaped');
      t.match(line, /\\u001b\[2K\\u000dtransfer 1/, 'shown escaped, so nothing is hidden');
      t.match(line, / \\\\u001b/, "the server's backslash doubled: no escape of ours");
    }
    t.equal(
      (JSON.parse(got.answer?.body ?? '{}') as { detail?: string }).detail,
      evil,
      'the answer is kept as received',
    );
  },
);
