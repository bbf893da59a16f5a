/**
 * What a crash does to each idempotency layer, on the same transfer route:
 * a keyed transfer is answered 201, the server process is killed (SIGKILL)
 * and started again, and the client, which never saw the answer, repeats the
 * request with the same key.
 *
 * - Ours: the key row committed with the transfer, so the repeat is a
 *   byte-identical replay and the money moved once.
 * - The peer library (@node-idempotency/core with its in-memory storage,
 *   wired as in test/bench/peer.ts): its keys lived in the killed process, so
 *   the repeat runs the transfer again and the money moves twice. This is the
 *   documented behaviour of an idempotency layer kept apart from the effect
 *   (docs/performance.md), asserted so the comparison stays true.
 */
import t, { type Test } from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { createSql } from '../../platform/pg/client.js';
import { testDatabase } from '../harness/db.js';
import { stopProcesses } from '../e2e/processes.js';
import {
  API_ENTRY,
  assertLedgerInvariants,
  newPrincipal,
  openAccount,
  post,
  startApi,
  type ApiProcess,
  type ServerEntry,
} from './fault-helpers.js';

const OPENING = 1_000_000;

async function kill(server: ApiProcess): Promise<void> {
  server.process.child.kill('SIGKILL');
  await server.process.exited;
}

async function crashThenRepeat(t: Test, entry: ServerEntry) {
  const db = await testDatabase(t);
  const owner = createSql(db.ownerUrl, { max: 1, applicationName: 'test-owner' });
  const servers: ApiProcess[] = [];
  t.teardown(async () => {
    await stopProcesses(servers.map((s) => s.process));
    await owner.end({ timeout: 1 });
  });
  let server = await startApi(db.appUrl, {}, entry);
  servers.push(server);
  const token = await newPrincipal(db.app);
  const openings = new Map<string, bigint>();
  const from = await openAccount(t, server.base, token, openings, 'From', OPENING);
  const to = await openAccount(t, server.base, token, openings, 'To', OPENING);
  const key = newId();
  const body = JSON.stringify({ from_account_id: from, to_account_id: to, amount: 100 });
  const first = await post(server.base, '/api/v1/transfers', token, body, key);
  t.equal(first.status, 201, 'the transfer is answered 201');
  await kill(server);
  server = await startApi(db.appUrl, {}, entry);
  servers.push(server);
  const repeat = await post(server.base, '/api/v1/transfers', token, body, key);
  const transfers = Number(
    (await owner<{ n: string }[]>`select count(*) as n from ledger_transfers`)[0]?.n,
  );
  const [balance] = await owner<{ balance: string }[]>`
    select balance::text from ledger_accounts where id = ${from}`;
  await assertLedgerInvariants(t, owner, openings);
  return { first, repeat, transfers, fromBalance: Number(balance?.balance) };
}

void t.test('ours: the repeat after a crash is a replay; the money moved once', async (t) => {
  const r = await crashThenRepeat(t, API_ENTRY);
  t.equal(r.repeat.status, 201);
  t.equal(r.repeat.replay, 'true', 'Idempotent-Replay: true');
  t.equal(r.repeat.body, r.first.body, 'byte for byte the first answer');
  t.equal(r.transfers, 1, 'one transfer');
  t.equal(r.fromBalance, OPENING - 100, 'debited once');
});

void t.test(
  'the in-memory peer: the repeat after a crash runs again; the money moved twice',
  async (t) => {
    const r = await crashThenRepeat(t, { script: 'test/bench/peer-server.ts', args: [] });
    t.equal(r.repeat.status, 201, 'answered as a new transfer');
    t.equal(r.repeat.replay, null, 'no replay header of ours');
    t.not(r.repeat.body, r.first.body, 'a different transfer');
    t.equal(r.transfers, 2, 'two transfers: the effect happened twice');
    t.equal(r.fromBalance, OPENING - 200, 'debited twice');
  },
);
