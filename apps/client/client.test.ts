/**
 * The typed ledger client against the whole application on a real
 * PostgreSQL (listening on 127.0.0.1): accounts and a transfer stated,
 * delivered and read back with the generated types; the intents' lanes; bad
 * options leave no outbox locked.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { startTestApp } from '../../test/harness/app.js';
import {
  LedgerClient,
  accountIntent,
  answerBody,
  transferIntent,
  type Account,
  type Transfer,
} from './client.js';
import { Outbox } from './outbox.js';

const A = '0190F2A4-1B2C-7D3E-8F40-123456789ABC';
const B = '0190f2a4-1b2c-7d3e-8f40-123456789abd';

void t.test('intents of the ledger: lanes, lower-case ids, keys', (t) => {
  t.match(transferIntent({ from_account_id: A, to_account_id: B, amount: 5 }), {
    operation: 'createTransfer',
    path: '/api/v1/transfers',
    body: { from_account_id: A.toLowerCase(), to_account_id: B, amount: 5 },
    lanes: [`account:${A.toLowerCase()}`, `account:${B}`],
  });
  t.same(
    transferIntent({ from_account_id: A, to_account_id: B, amount: 5 }, { independent: true })
      .lanes,
    [],
  );
  const key = '0190f2a4-1b2c-7d3e-8f40-000000000009';
  t.equal(transferIntent({ from_account_id: A, to_account_id: B, amount: 5 }, { key }).key, key);
  t.match(accountIntent({ name: 'N', opening_balance: 1 }, { key }), {
    operation: 'createAccount',
    body: { name: 'N', opening_balance: 1 },
    lanes: [],
    key,
  });
  t.end();
});

void t.test('LedgerClient states, delivers and reads the answers', async (t) => {
  const k = await startTestApp(t);
  const baseUrl = await k.app.http.listen({ host: '127.0.0.1', port: 0 });
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-ledger-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'outbox.sqlite');
  const options = {
    file,
    baseUrl,
    token: k.alice.token,
    keyTtlMs: 24 * 3_600_000,
    ttlMarginMs: 3_600_000,
    timeoutMs: 10_000,
    concurrency: 2,
    backoff: { baseMs: 10, capMs: 100, maxRetryAfterMs: 1_000 },
  };
  t.throws(() => LedgerClient.open({ ...options, concurrency: 0 }), /concurrency/);
  Outbox.open(file).close();
  t.pass('bad options left the file unlocked');

  const client = LedgerClient.open(options);
  t.teardown(() => {
    client.close();
  });
  const from = client.createAccount({ name: 'From', opening_balance: 100 });
  const to = client.createAccount({ name: 'To', opening_balance: 0 });
  t.equal(answerBody(from), undefined, 'no answer yet');
  const report = await client.drain();
  t.match(report, { stoppedBy: 'empty', pending: 0 });
  const a = answerBody(client.outbox.get(from.key)!);
  const b = answerBody(client.outbox.get(to.key)!);
  if (a?.ok !== true || b?.ok !== true) throw new Error('accounts not opened');
  const fromAccount = a.value as Account;
  const toAccount = b.value as Account;
  t.equal(fromAccount.balance, 100);

  const intent = client.transfer({
    from_account_id: fromAccount.id,
    to_account_id: toAccount.id,
    amount: 60,
  });
  const done = await client.deliver(intent);
  t.match(done, { state: 'done', answer: { status: 201 } });
  const moved = answerBody(done);
  t.equal(moved?.ok === true ? (moved.value as Transfer).amount : undefined, 60);
  t.same(await client.deliver(done), done, 'a settled intent is not sent again');

  const poor = await client.deliver(
    client.transfer({
      from_account_id: fromAccount.id,
      to_account_id: toAccount.id,
      amount: 1_000,
    }),
  );
  const refused = answerBody(poor);
  t.match(refused, { ok: false, value: { code: 'conflict', reason: 'insufficient_funds' } });

  t.equal(
    answerBody({ ...done, answer: { ...done.answer!, body: 'not json' } }),
    undefined,
    'a body that is not JSON',
  );
});
