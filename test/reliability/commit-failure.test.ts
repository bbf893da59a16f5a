/**
 * A COMMIT that fails after the answer was ready, on the ledger's transfer
 * route, over real HTTP to a real `api` process.
 *
 * The test adds, as the owner, a deferred constraint trigger on
 * ledger_transfers that refuses a transfer of 13 at COMMIT (`DEFERRABLE
 * INITIALLY DEFERRED`), so the handler runs to its end, the key row is
 * completed, and only the COMMIT fails. Shown:
 * - the trigger refuses nothing else (a transfer of 12 commits);
 * - a keyed transfer of 13 answers `500 internal_error`; the server logs the
 *   outcome `commit_failed` (the failure was the COMMIT's); no key row, no
 *   transfer, balances unchanged; a retry with the same key and body fails the
 *   same way and stores nothing either: the key stays free;
 * - the unkeyed transfer of 13 answers 500 and leaves nothing;
 * - once the trigger is dropped, the retry with the same key and body is an
 *   original 201 that moves the money once, and a further repeat is a
 *   byte-identical replay; no key row is left in progress; the ledger's
 *   invariants hold.
 */
import t from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { testDatabase } from '../harness/db.js';
import { bySoak } from '../harness/soak.js';
import { stopProcesses } from '../e2e/processes.js';
import {
  assertLedgerInvariants,
  balances,
  keysInProgress,
  newPrincipal,
  openAccount,
  post,
  startApi,
  type Answer,
} from './fault-helpers.js';

/** How many refused keyed attempts (first try plus same-key retries) are made. */
const REFUSED_ATTEMPTS = bySoak(2, 10);
const REFUSED = 13;

void t.test('a COMMIT that fails on a transfer answers 500 and stores nothing', async (t) => {
  const db = await testDatabase(t);
  const api = await startApi(db.appUrl);
  t.teardown(() => stopProcesses([api.process]));
  const token = await newPrincipal(db.app);
  const openings = new Map<string, bigint>();
  const a = await openAccount(t, api.base, token, openings, 'From', 1_000);
  const b = await openAccount(t, api.base, token, openings, 'To', 0);
  const transfer = (amount: number, key: string | undefined): Promise<Answer> =>
    post(
      api.base,
      '/api/v1/transfers',
      token,
      JSON.stringify({ from_account_id: a, to_account_id: b, amount }),
      key,
    );
  const transferIds = async (): Promise<string[]> =>
    (await db.owner<{ id: string }[]>`select id from ledger_transfers order by id`).map(
      (r) => r.id,
    );
  const keyRows = (key: string) =>
    db.owner`select state, response_status from idempotency_keys where key = ${key}`;
  // The outcome the server logged for an answer (its request log line carries
  // the correlation id of the problem body); the wait is bounded so that a
  // wrong answer fails the test instead of hanging it.
  const outcomeOf = async (answer: Answer): Promise<unknown> => {
    const id = (JSON.parse(answer.body) as { correlation_id?: string }).correlation_id;
    if (id === undefined) return 'no correlation id in the answer';
    let timer: NodeJS.Timeout | undefined;
    const line = await Promise.race([
      api.process.waitForLine(
        (l) => l['correlation_id'] === id && l['msg'] === 'request completed',
      ),
      new Promise<Record<string, unknown>>((resolve) => {
        timer = setTimeout(() => {
          resolve({ idempotency_outcome: 'no request log line' });
        }, 30_000);
      }),
    ]);
    clearTimeout(timer);
    return line['idempotency_outcome'];
  };

  await db.owner`
    create function test_refuse_at_commit() returns trigger language plpgsql as $$
    begin
      if new.amount = 13 then
        raise exception 'a transfer of 13 is refused at commit';
      end if;
      return null;
    end $$`;
  await db.owner`
    create constraint trigger test_refuse_at_commit
      after insert on ledger_transfers
      deferrable initially deferred
      for each row execute function test_refuse_at_commit()`;

  const control = await transfer(12, newId());
  t.equal(control.status, 201, 'the trigger lets any other amount commit');
  const before = await balances(db.owner);
  t.same(before, { [a]: 988, [b]: 12 });
  const committed = await transferIds();
  t.equal(committed.length, 1);

  const key = newId();
  for (let attempt = 1; attempt <= REFUSED_ATTEMPTS; attempt += 1) {
    const refused = await transfer(REFUSED, key);
    t.equal(refused.status, 500, `attempt ${String(attempt)}: the failed COMMIT is a 500`);
    t.equal((JSON.parse(refused.body) as { code: string }).code, 'internal_error');
    t.equal(refused.replay, null, 'not a replay');
    t.equal(
      await outcomeOf(refused),
      'commit_failed',
      'the answer was ready; the COMMIT itself failed',
    );
    t.same(await keyRows(key), [], `attempt ${String(attempt)}: no key row is stored`);
    t.same(await transferIds(), committed, 'no transfer row');
    t.same(await balances(db.owner), before, 'balances unchanged');
  }

  const unkeyed = await transfer(REFUSED, undefined);
  t.equal(unkeyed.status, 500, 'the unkeyed transfer of 13 is a 500 too');
  t.equal((JSON.parse(unkeyed.body) as { code: string }).code, 'internal_error');
  t.same(await transferIds(), committed, 'the unkeyed failure left no transfer');
  t.same(await balances(db.owner), before, 'nor moved money');
  const [keyCount] = await db.owner<{ n: string }[]>`
    select count(*)::text as n from idempotency_keys where action = 'createTransfer'`;
  t.equal(keyCount?.n, '1', 'the only transfer key row is the control one');

  await db.owner`drop trigger test_refuse_at_commit on ledger_transfers`;
  const retry = await transfer(REFUSED, key);
  t.equal(retry.status, 201, `the key was still free: the retry runs: ${retry.body}`);
  t.equal(retry.replay, 'false', 'an original answer, not a replay');
  const made = JSON.parse(retry.body) as { id: string; amount: number };
  t.equal(made.amount, REFUSED);
  t.same(await transferIds(), [...committed, made.id].sort(), 'exactly one more transfer');
  t.same(
    await balances(db.owner),
    { [a]: 988 - REFUSED, [b]: 12 + REFUSED },
    'the money moved once',
  );
  t.same(await keyRows(key), [{ state: 'completed', response_status: 201 }]);

  const replay = await transfer(REFUSED, key);
  t.equal(replay.status, 201);
  t.equal(replay.replay, 'true', 'a further repeat is a replay');
  t.equal(replay.body, retry.body, 'byte-identical');
  t.same(await transferIds(), [...committed, made.id].sort(), 'the replay moved nothing');

  t.same(await keysInProgress(db.owner), [], 'no idempotency key row is left in progress');
  await assertLedgerInvariants(t, db.owner, openings);
  t.same(await stopProcesses([api.process]), [0], 'the server drains and exits 0');
});
