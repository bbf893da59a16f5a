/**
 * When an intent counts as reported, run in this process against real
 * outbox files: an equal intent settled but never printed refuses a rerun
 * of its command and `--key` prints it, and an intent is marked reported
 * only once its result has left standard output, never on a write error.
 */
import path from 'node:path';
import t, { type Test } from 'tap';
import { EXIT, runCli } from './cli.js';
import { closedPort, ID_A, ID_B, io, tempDir } from './cli-fixture.js';
import { transferIntent } from './client.js';
import { Outbox } from './outbox.js';

/** The command rerun in the refusal tests: the transfer of 5 from A to B. */
const RERUN = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5', '--wait', '0'];

/**
 * Runs {@link RERUN} on an outbox file, against a port nothing listens on,
 * and checks it is refused as an equal intent is: exit 3, nothing on
 * standard output, one line on standard error.
 *
 * @returns that line and the environment it ran with.
 */
async function refusedRerun(
  t: Test,
  file: string,
): Promise<{ err: string; env: Record<string, string> }> {
  const env = {
    CLIENT_OUTBOX: file,
    CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}`,
    CLIENT_TOKEN: 'tok',
  };
  const o = io();
  t.equal(await runCli(RERUN, env, o), EXIT.failed, o.err());
  t.equal(o.out(), '', 'nothing printed as if this command had stated it');
  const err = o.err();
  t.equal(err.split('\n').length, 2, `one line: ${err}`);
  return { err, env };
}

void t.test(
  'killed after the answer was recorded, before it was printed: a rerun is refused, --key prints it',
  async (t) => {
    // Changed: the rerun printed the recorded answer and exited 0,
    // so a new command equal to an intent settled by a drain or a library
    // caller exited 0 with an old answer while it sent nothing. It is now
    // refused like a pending one; --key prints the answer.
    const file = path.join(await tempDir(t), 'outbox.sqlite');
    const outbox = Outbox.open(file);
    const { intent } = outbox.enqueue(
      transferIntent({ from_account_id: ID_A, to_account_id: ID_B, amount: 5 }),
    );
    // What a process killed between recordFinal and its print leaves behind
    // (or a drain, or a library caller, that settled it).
    outbox.recordAttempt(intent.seq, 1, Date.now());
    outbox.recordFinal(intent.seq, {
      attempts: 1,
      state: 'done',
      failure: null,
      answer: {
        status: 201,
        replayed: false,
        marked: true,
        headers: {},
        body: JSON.stringify({ id: 't1', amount: 5, from_account_id: ID_A, to_account_id: ID_B }),
      },
      now: Date.now(),
    });
    outbox.close();
    const env = {
      CLIENT_OUTBOX: file,
      CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}`,
      CLIENT_TOKEN: 'tok',
    };
    const argv = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5', '--wait', '0'];
    const o = io();
    const code = await runCli(argv, env, o);
    t.equal(code, EXIT.failed, `refused, never 0 for an intent it did not state: ${o.err()}`);
    t.match(
      o.err(),
      new RegExp(`^client: .*${intent.key}.*done.*--key ${intent.key}.*prints its answer.*--again`),
    );
    t.equal(o.out(), '', 'no answer printed as if this command had stated it');
    const json = io();
    t.equal(await runCli([...argv, '--json'], env, json), EXIT.failed);
    t.equal(json.out(), '');
    const unreported = Outbox.open(file);
    t.equal(unreported.list().length, 1, 'no new intent, no new key');
    t.equal(unreported.get(intent.key)?.reportedAt, null);
    unreported.close();
    // --key names it: its recorded answer is printed and it is reported.
    const byKey = io();
    t.equal(await runCli([...argv, '--key', intent.key], env, byKey), EXIT.ok, byKey.err());
    t.match(byKey.out(), new RegExp(`^transfer ${intent.key}: 201 created: transfer t1 moved 5`));
    const after = Outbox.open(file);
    const intents = after.list();
    after.close();
    t.equal(intents.length, 1, 'no new intent, no new key');
    t.match(intents[0], { key: intent.key, reportedAt: Number });
    // Reported now: the same command states a new transfer, as asked.
    const next = await runCli(argv, env, io());
    t.equal(next, EXIT.pending);
    const last = Outbox.open(file);
    t.equal(last.list().length, 2);
    last.close();
  },
);

void t.test(
  'an intent is marked reported only once its result has left, never on a write error',
  async (t) => {
    const file = path.join(await tempDir(t), 'outbox.sqlite');
    const outbox = Outbox.open(file);
    const { intent } = outbox.enqueue(
      transferIntent({ from_account_id: ID_A, to_account_id: ID_B, amount: 5 }),
    );
    outbox.recordAttempt(intent.seq, 1, Date.now());
    outbox.recordFinal(intent.seq, {
      attempts: 1,
      state: 'done',
      failure: null,
      answer: { status: 201, replayed: false, marked: true, headers: {}, body: '{"id":"t1"}' },
      now: Date.now(),
    });
    outbox.close();
    const env = {
      CLIENT_OUTBOX: file,
      CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}`,
      CLIENT_TOKEN: 'tok',
    };
    const argv = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5', '--key', intent.key];
    // A pipe whose reader went away: the write fails after it was called.
    let err = '';
    const broken = {
      stdout: {
        write: (_s: string, done?: (e?: Error | null) => void) => {
          setImmediate(() => done?.(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' })));
          return false;
        },
      },
      stderr: { write: (s: string) => ((err += s), true) },
    };
    t.equal(
      await runCli(argv, env, broken),
      74,
      'exit 74: the result was not seen, never 1 (refused) or 0',
    );
    t.match(err, /standard output.*EPIPE.*not marked reported/);
    const unreported = Outbox.open(file);
    t.equal(unreported.get(intent.key)?.reportedAt, null, 'not reported: nobody saw it');
    unreported.close();
    // A write that has not left yet: the command waits for it.
    let release: (() => void) | undefined;
    const slow = {
      stdout: {
        write: (_s: string, done?: (e?: Error | null) => void) => {
          release = () => done?.();
          return false;
        },
      },
      stderr: { write: () => true },
    };
    let ended = false;
    const running = runCli(argv, env, slow).then((code) => ((ended = true), code));
    await new Promise((r) => setTimeout(r, 50));
    t.equal(ended, false, 'the command waits for its result to leave');
    t.ok(release, 'the result was written');
    release?.();
    t.equal(await running, EXIT.ok);
    const reported = Outbox.open(file);
    t.type(reported.get(intent.key)?.reportedAt, 'number', 'reported once written');
    reported.close();
  },
);

void t.test(
  'a rerun refused for an equal intent of unknown outcome says it may have taken effect, never to state it again',
  async (t) => {
    // An attempt was cut off and the repeats met unmarked refusals: the
    // intent ended outcome_unknown, and its command was killed before it
    // printed that. The money may have moved: the refusal of the same
    // command must not offer a second transfer as the way on.
    const file = path.join(await tempDir(t), 'outbox.sqlite');
    const outbox = Outbox.open(file);
    const { intent } = outbox.enqueue(
      transferIntent({ from_account_id: ID_A, to_account_id: ID_B, amount: 5 }),
    );
    outbox.recordAttempt(intent.seq, 3, Date.now());
    outbox.recordFinal(intent.seq, {
      attempts: 3,
      state: 'failed',
      failure: 'outcome_unknown',
      answer: {
        status: 404,
        replayed: false,
        marked: false,
        headers: {},
        body: JSON.stringify({ code: 'not_found', detail: 'no route (gateway)' }),
      },
      now: Date.now(),
    });
    outbox.close();
    const { err, env } = await refusedRerun(t, file);
    t.match(err, new RegExp(`^client: .*${intent.key}.*outcome`), 'names the key and the outcome');
    t.match(err, /may have taken effect/, 'says it may have taken effect');
    t.match(err, /do not state it again/, 'says not to state it again');
    t.match(
      err,
      /check the balances of both accounts \(GET \/api\/v1\/accounts\/\{id\}\)/,
      'says how to check',
    );
    t.match(err, new RegExp(`--key ${intent.key}`), 'names how to print what it met');
    t.notMatch(
      err,
      /--again states a second one/,
      'does not offer a second transfer as the way on',
    );
    // --key, as the refusal says, prints what it met, sending nothing.
    const byKey = io();
    t.equal(await runCli([...RERUN, '--key', intent.key], env, byKey), EXIT.failed, byKey.err());
    t.match(
      byKey.out(),
      new RegExp(
        `^transfer ${intent.key}: FAILED: outcome unknown: 404 not_found.*may have taken effect`,
      ),
    );
    const after = Outbox.open(file);
    t.equal(after.list().length, 1, 'no new intent, no new key');
    after.close();
  },
);

void t.test(
  'a rerun refused for an equal intent whose key expired says it may have taken effect, with an attempt counted or none',
  async (t) => {
    // The first attempt was cut off and the key grew too old to repeat
    // before the answer came: the intent ended failed expired, and its
    // command was killed before it printed that. The money may have moved.
    const file = path.join(await tempDir(t), 'outbox.sqlite');
    const outbox = Outbox.open(file);
    const body = { from_account_id: ID_A, to_account_id: ID_B, amount: 5 };
    const { intent } = outbox.enqueue(transferIntent(body));
    outbox.recordAttempt(intent.seq, 1, Date.now());
    outbox.recordExpired(intent.seq, Date.now());
    outbox.close();
    const { err } = await refusedRerun(t, file);
    t.match(err, new RegExp(`^client: .*${intent.key}.*expired`), 'names the key and the expiry');
    t.match(err, /may have taken effect/, 'says it may have taken effect');
    t.match(err, /do not state it again/, 'says not to state it again');
    t.match(err, /check the balances of both accounts/, 'says how to check');
    t.notMatch(err, /--again states a second one/, 'does not offer a second transfer');

    // The same position with no attempt counted: the key may have been sent
    // all the same (given with --key after a program of the caller's sent
    // it, or a restored outbox), so the refusal is the same.
    const file2 = path.join(await tempDir(t), 'outbox.sqlite');
    const unsent = Outbox.open(file2);
    const stated = unsent.enqueue(transferIntent(body)).intent;
    unsent.recordExpired(stated.seq, Date.now());
    unsent.close();
    const second = (await refusedRerun(t, file2)).err;
    t.match(second, new RegExp(`^client: .*${stated.key}.*no attempt counted here`));
    t.match(second, /may have taken effect/);
    t.notMatch(second, /--again states a second one/);
  },
);
