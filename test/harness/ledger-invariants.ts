/**
 * The ledger's invariants, read back from the tables: shared by the ledger
 * tests and the fault suite, which check them after every scenario.
 */
import type { Test } from 'tap';
import type { Sql } from '../../platform/pg/client.js';

/**
 * Asserts, as the owner role: every account the database holds was created
 * by the test with the opening balance it recorded; every balance equals
 * that opening balance plus the transfers into the account minus the
 * transfers out of it, and is not negative; money is neither made nor lost
 * (the balances add up to the opening balances); and a transfer moves money
 * between accounts of its own principal.
 *
 * @param t the test.
 * @param owner a pool as the owner role.
 * @param openings opening balances by account id, as the test recorded them.
 */
export async function assertLedgerInvariants(
  t: Test,
  owner: Sql,
  openings: ReadonlyMap<string, bigint>,
): Promise<void> {
  const rows = await owner<
    { id: string; balance: string; opening: string; incoming: string; outgoing: string }[]
  >`
    select a.id,
           a.balance::text as balance,
           a.opening_balance::text as opening,
           coalesce((select sum(x.amount) from ledger_transfers x where x.to_account_id = a.id), 0)::text as incoming,
           coalesce((select sum(x.amount) from ledger_transfers x where x.from_account_id = a.id), 0)::text as outgoing
      from ledger_accounts a
     order by a.id`;
  t.same(
    rows.map((r) => r.id),
    [...openings.keys()].sort(),
    'invariant: the accounts are exactly those the test created',
  );
  let balances = 0n;
  let opened = 0n;
  for (const row of rows) {
    const opening = openings.get(row.id);
    const balance = BigInt(row.balance);
    t.equal(BigInt(row.opening), opening, `invariant: ${row.id} kept its opening balance`);
    t.equal(
      balance,
      BigInt(row.opening) + BigInt(row.incoming) - BigInt(row.outgoing),
      `invariant: ${row.id} balance = opening + incoming - outgoing`,
    );
    t.ok(balance >= 0n, `invariant: ${row.id} balance is not negative`);
    balances += balance;
    opened += opening ?? 0n;
  }
  t.equal(balances, opened, 'invariant: the balances add up to the opening balances');
  const [crossed] = await owner<{ n: string }[]>`
    select count(*)::text as n
      from ledger_transfers x
      join ledger_accounts f on f.id = x.from_account_id
      join ledger_accounts d on d.id = x.to_account_id
     where f.principal_id <> x.principal_id or d.principal_id <> x.principal_id`;
  t.equal(crossed?.n, '0', "invariant: a transfer moves money between its principal's accounts");
}
