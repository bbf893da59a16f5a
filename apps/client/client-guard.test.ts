/**
 * The rule that an equal intent whose result was never reported is not
 * stated again, held by the library: the outbox finds such an intent with
 * one indexed query, and `LedgerClient` refuses to state an equal one
 * without a key of the caller's or `again`. On real node:sqlite files;
 * nothing is sent.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { EqualIntentError, LedgerClient, intentVerdict, transferIntent } from './client.js';
import { Outbox, UNREPORTED_EQUAL_SQL } from './outbox.js';

const A = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
const B = '0190f2a4-1b2c-7d3e-8f40-123456789abd';
const BODY = { from_account_id: A, to_account_id: B, amount: 5 };

async function tempFile(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-guard-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return path.join(dir, 'outbox.sqlite');
}

function open(file: string): LedgerClient {
  return LedgerClient.open({
    file,
    baseUrl: 'http://127.0.0.1:3999',
    token: 'tok',
    ttlMarginMs: 3_600_000,
    timeoutMs: 1_000,
    concurrency: 1,
    backoff: { baseMs: 10, capMs: 100, maxRetryAfterMs: 1_000 },
  });
}

const done = {
  attempts: 1,
  state: 'done',
  failure: null,
  answer: { status: 201, replayed: false, marked: true, headers: {}, body: '{"id":"t"}' },
  now: 5,
} as const;

void t.test('the outbox finds an equal unreported intent, by an index', async (t) => {
  const file = await tempFile(t);
  const outbox = Outbox.open(file);
  const wanted = transferIntent(BODY);
  t.equal(outbox.unreportedEqual(wanted), undefined, 'none in a new outbox');
  const { intent } = outbox.enqueue(wanted);
  t.equal(outbox.unreportedEqual(wanted)?.key, intent.key, 'pending');
  t.equal(
    outbox.unreportedEqual(transferIntent({ ...BODY, amount: 6 })),
    undefined,
    'another body is not equal',
  );
  t.equal(
    outbox.unreportedEqual(transferIntent(BODY, { independent: true }))?.key,
    intent.key,
    'lanes do not make it another request',
  );
  outbox.recordFinal(intent.seq, done);
  t.equal(outbox.unreportedEqual(wanted)?.key, intent.key, 'settled, not reported');
  outbox.markReported(intent.seq, 6);
  t.equal(outbox.unreportedEqual(wanted), undefined, 'reported');
  outbox.close();

  const db = new DatabaseSync(file);
  t.teardown(() => {
    db.close();
  });
  const plan = db
    .prepare(`explain query plan ${UNREPORTED_EQUAL_SQL}`)
    .all('createTransfer', '/api/v1/transfers', 'POST', '{}')
    .map((r) => String(r['detail']))
    .join('; ');
  t.match(plan, /USING INDEX intents_unreported/, plan);
});

void t.test('LedgerClient refuses an equal intent never reported', async (t) => {
  const file = await tempFile(t);
  const client = open(file);
  t.teardown(() => {
    client.close();
  });
  const first = client.transfer(BODY);
  const refused = t.throws(() => client.transfer(BODY), EqualIntentError) as EqualIntentError;
  t.equal(refused.intent.key, first.key, 'names the intent');
  t.match(refused.message, new RegExp(`${first.key}.*pending`));
  t.equal(client.outbox.list().length, 1, 'nothing stated');

  const second = client.transfer(BODY, { again: true });
  t.not(second.key, first.key, 'again states a second one');
  const key = '0190f2a4-1b2c-7d3e-8f40-000000000009';
  t.equal(client.transfer(BODY, { key }).key, key, "a caller's key is not refused");
  t.equal(client.transfer(BODY, { key }).key, key, 'and names its intent again');
  t.equal(
    client.state(transferIntent(BODY, { key })).created,
    false,
    'state tells an existing one',
  );

  for (const intent of client.outbox.list()) client.outbox.recordFinal(intent.seq, done);
  t.throws(() => client.transfer(BODY), EqualIntentError, 'settled, not reported');
  for (const intent of client.outbox.list()) client.report(intent);
  t.equal(client.outbox.list().length, 3);
  const third = client.transfer(BODY);
  t.equal(client.outbox.list().length, 4, 'every equal one reported: stated');
  t.equal(intentVerdict(third), 'pending');
  client.report(third);
  t.equal(client.outbox.get(third.key)?.reportedAt, null, 'a pending intent is not reported');
});

void t.test('the verdict of an intent', (t) => {
  const outbox = { state: 'done', failure: null } as const;
  const answer = (status: number, marked: boolean | null) => ({
    status,
    replayed: false,
    marked,
    headers: {},
    body: '{}',
  });
  const of = (x: object) =>
    intentVerdict({ ...outbox, ...x } as unknown as Parameters<typeof intentVerdict>[0]);
  t.equal(of({ answer: answer(201, true) }), 'ok');
  t.equal(of({ answer: answer(404, true) }), 'rejected');
  t.equal(of({ answer: answer(404, null) }), 'failed', 'an unmarked refusal is not certain');
  t.equal(of({ state: 'failed', failure: 'expired', answer: null }), 'failed');
  t.equal(of({ state: 'pending', answer: null }), 'pending');
  t.end();
});

void t.test(
  'the refusal of an equal intent of unknown outcome says it may have taken effect, never to state it again',
  async (t) => {
    const file = await tempFile(t);
    const client = open(file);
    t.teardown(() => {
      client.close();
    });
    const first = client.state(transferIntent(BODY)).intent;
    client.outbox.recordAttempt(first.seq, 2, 5);
    client.outbox.recordFinal(first.seq, {
      attempts: 2,
      state: 'failed',
      failure: 'outcome_unknown',
      answer: { status: 404, replayed: false, marked: false, headers: {}, body: '{}' },
      now: 6,
    });
    const refused = (() => {
      try {
        client.state(transferIntent(BODY));
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    t.type(refused, EqualIntentError);
    const message = (refused as Error).message;
    t.match(message, first.key);
    t.match(message, /may have taken effect/);
    t.match(message, /do not state it again/);
    t.match(message, /check whether it took effect/);
    t.notMatch(message, /state with again to mean a second one/);
  },
);

void t.test(
  'the refusal of an equal intent whose key expired says it may have taken effect, with an attempt counted or none',
  async (t) => {
    const file = await tempFile(t);
    const client = open(file);
    t.teardown(() => {
      client.close();
    });
    const refusal = (body: typeof BODY = BODY): string => {
      try {
        client.state(transferIntent(body));
      } catch (err) {
        t.type(err, EqualIntentError);
        return (err as Error).message;
      }
      t.fail('not refused');
      return '';
    };
    // An attempt was sent (it may have reached the server), then the key
    // grew too old to repeat: the outcome is as unknown as outcome_unknown's.
    const sent = client.state(transferIntent(BODY)).intent;
    client.outbox.recordAttempt(sent.seq, 1, 5);
    client.outbox.recordExpired(sent.seq, 6);
    const message = refusal();
    t.match(message, sent.key);
    t.match(message, /may have taken effect/);
    t.match(message, /do not state it again/);
    t.match(message, /check whether it took effect/);
    t.notMatch(message, /state with again to mean a second one/);
    client.outbox.markReported(sent.seq, 7);
    t.match(refusal(), sent.key, 'still refused once reported');
    // No attempt counted before its key expired: it may have been sent all
    // the same (a key the caller gave, sent by a program of its own, or a
    // restored copy of the outbox), so the refusal is the same.
    const other = { ...BODY, amount: BODY.amount + 1 };
    const unsent = client.state(transferIntent(other)).intent;
    client.outbox.recordExpired(unsent.seq, 8);
    const second = refusal(other);
    t.match(second, unsent.key);
    t.match(second, /failed expired, no attempt counted here/);
    t.match(second, /may have taken effect/);
    t.notMatch(second, /state with again to mean a second one/);
  },
);

void t.test(
  'an equal intent that may have taken effect refuses a new one even after its result was printed',
  async (t) => {
    // Printing "outcome unknown" marks the intent reported; the same
    // command run again (the shell's history, a wrapper that retries a
    // non-zero exit) must still not state a second transfer under a new key.
    const file = await tempFile(t);
    const client = open(file);
    t.teardown(() => {
      client.close();
    });
    for (const failure of ['outcome_unknown', 'expired'] as const) {
      const body = { ...BODY, amount: failure === 'expired' ? 7 : 6 };
      const first = client.state(transferIntent(body)).intent;
      client.outbox.recordAttempt(first.seq, 1, 5);
      client.outbox.recordFinal(first.seq, {
        attempts: 1,
        state: 'failed',
        failure,
        answer: { status: 404, replayed: false, marked: false, headers: {}, body: '{}' },
        now: 6,
      });
      client.outbox.markReported(first.seq, 7);
      const refused = (() => {
        try {
          client.state(transferIntent(body));
        } catch (err) {
          return err;
        }
        return undefined;
      })();
      t.type(refused, EqualIntentError, `${failure}: refused after it was reported`);
      t.match((refused as Error).message, first.key, `${failure}: names its key`);
      t.match((refused as Error).message, /do not state it again/);
      t.equal(
        client.state(transferIntent(body), { again: true }).intent.key === first.key,
        false,
        `${failure}: again still states a second one on purpose`,
      );
    }
    // A reported intent the server answered (a marked 422 here) is no reason to refuse.
    const done = client.state(transferIntent({ ...BODY, amount: 8 })).intent;
    client.outbox.recordAttempt(done.seq, 1, 5);
    client.outbox.recordFinal(done.seq, {
      attempts: 1,
      state: 'done',
      failure: null,
      answer: { status: 422, replayed: false, marked: true, headers: {}, body: '{}' },
      now: 6,
    });
    client.outbox.markReported(done.seq, 7);
    t.not(client.state(transferIntent({ ...BODY, amount: 8 })).intent.key, done.key);
  },
);

void t.test(
  'a pending equal intent is named before an older reported one of unknown outcome',
  async (t) => {
    // The old one was printed as outcome unknown, checked, and stated
    // again on purpose; the new one is still pending. A rerun must be told
    // of the pending one, never offered again beside it.
    const file = await tempFile(t);
    const client = open(file);
    t.teardown(() => {
      client.close();
    });
    const old = client.state(transferIntent(BODY)).intent;
    client.outbox.recordAttempt(old.seq, 1, 5);
    client.outbox.recordFinal(old.seq, {
      attempts: 1,
      state: 'failed',
      failure: 'outcome_unknown',
      answer: { status: 404, replayed: false, marked: false, headers: {}, body: '{}' },
      now: 6,
    });
    client.outbox.markReported(old.seq, 7);
    const pending = client.state(transferIntent(BODY), { again: true }).intent;
    const refused = (() => {
      try {
        client.state(transferIntent(BODY));
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    t.type(refused, EqualIntentError);
    t.equal((refused as EqualIntentError).intent.key, pending.key, 'the pending one is named');
    t.match((refused as Error).message, /is pending/);
  },
);
