/**
 * The transfer's statement runs on a generic plan (docs/DECISIONS.md, "A
 * generic plan for the one statement of a transfer"), cached per
 * connection. On a small table, PostgreSQL's cheapest generic plan for two
 * rows by primary key is a sequential scan, and a cached plan keeps
 * scanning every page while the table's dead row versions pile up: so the
 * statement must find its accounts, and the foreign keys of its insert
 * theirs, through an index whatever the table's size. Counted from
 * `pg_stat_user_tables` over transfers made through the real adapter on a
 * freshly analyzed table of 256 accounts in a few pages.
 */
import t from 'tap';
import { systemClock } from '../../../../kernel/clock/index.js';
import { newId } from '../../../../kernel/ids/index.js';
import { testDatabase } from '../../../../test/harness/db.js';
import { testUnitOfWork } from '../../../../test/harness/uow.js';
import { createLedgerModule } from '../../index.js';

const ACCOUNTS = 256;
const TRANSFERS = 60;

interface Scans {
  seq: number;
  idx: number;
}

void t.test('a transfer scans no table of accounts, however small', async (t) => {
  const tdb = await testDatabase(t);
  const {
    sql: pool,
    db,
    uow,
  } = testUnitOfWork(t, tdb, {
    applicationName: 'transfer-plan-test',
    max: 2,
    backoffBaseMs: 1,
  });
  const ledger = createLedgerModule({ db, uow, clock: systemClock }).service;
  const principalId = newId();
  await tdb.owner`insert into principals (id, kind, display_name) values (${principalId}, 'user', 'plan')`;
  const accounts = (
    await tdb.owner<{ id: string }[]>`
      insert into ledger_accounts
             (id, principal_id, name, opening_balance, balance, version, created_at, updated_at)
      select uuidv7(), ${principalId}, 'plan ' || i, 1000000, 1000000, 1, now(), now()
        from generate_series(1, ${ACCOUNTS}) i
      returning id`
  ).map((r) => r.id);
  await tdb.owner`vacuum analyze ledger_accounts`;
  const pages = await tdb.owner<{ relpages: number }[]>`
    select relpages from pg_class where relname = 'ledger_accounts'`;
  t.ok((pages[0]?.relpages ?? 0) < 10, 'the table is a few pages: where a scan looks cheapest');

  const scans = async (): Promise<Scans> => {
    const rows = await tdb.owner<{ seq: string; idx: string }[]>`
      select seq_scan::text as seq, coalesce(idx_scan, 0)::text as idx
        from pg_stat_user_tables where relname = 'ledger_accounts'`;
    return { seq: Number(rows[0]?.seq ?? 0), idx: Number(rows[0]?.idx ?? 0) };
  };
  // A session flushes its counters at the end of a statement at most once
  // a second: poke both of the pool's sessions until the transfers (each
  // finds its two accounts at least once) have arrived.
  const settled = async (since: Scans): Promise<Scans> => {
    for (let i = 0; i < 100; i++) {
      await Promise.all([pool`select 1`, pool`select 1`]);
      await tdb.owner`select pg_stat_clear_snapshot()`;
      const now = await scans();
      if (now.seq - since.seq + (now.idx - since.idx) >= TRANSFERS) return now;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    return scans();
  };
  const before = await settled({ seq: -1e9, idx: 0 });
  for (let i = 0; i < TRANSFERS; i++) {
    const from = accounts[i % ACCOUNTS]!;
    const to = accounts[(i * 7 + 1) % ACCOUNTS]!;
    await ledger.transfer(principalId, { fromAccountId: from, toAccountId: to, amount: 1 });
  }
  const after = await settled(before);
  t.comment(
    `over ${String(TRANSFERS)} transfers: ${String(after.seq - before.seq)} sequential scans, ${String(after.idx - before.idx)} index scans`,
  );
  t.equal(after.seq - before.seq, 0, 'no sequential scan of ledger_accounts');
  t.ok(after.idx - before.idx >= TRANSFERS, 'the accounts were found through an index');
});
