import t, { type Test } from 'tap';
import { ManualClock } from '../../../kernel/clock/index.js';
import { isAppError } from '../../../kernel/errs/index.js';
import { newId } from '../../../kernel/ids/index.js';
import { TransactionRequiredError } from '../../../kernel/txn/index.js';
import { testDatabase } from '../../../test/harness/db.js';
import { testUnitOfWork } from '../../../test/harness/uow.js';
import { PgAccountRepository } from '../adapters/postgres/accounts.js';
import { toMinorUnits } from '../adapters/postgres/minor-units.js';
import { PgTransferRepository } from '../adapters/postgres/transfers.js';
import { LedgerService, MAX_MINOR_UNITS } from './ledger-service.js';

async function setup(t: Test) {
  const tdb = await testDatabase(t);
  // The application role, so every statement also proves its grants.
  const { db, uow } = testUnitOfWork(t, tdb, {
    applicationName: 'ledger-service-test',
    backoffBaseMs: 1,
  });
  const clock = new ManualClock('2030-01-01T00:00:00.000Z');
  const accounts = new PgAccountRepository(db);
  const transfers = new PgTransferRepository(db);
  const ledger = new LedgerService({ uow, clock, accounts, transfers });
  const principal = newId();
  await tdb.owner`insert into principals (id, kind, display_name) values (${principal}, 'user', 'P')`;
  return { tdb, db, uow, clock, accounts, transfers, ledger, principal };
}

/** The code and first pointer of the AppError a promise rejects with. */
async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (!isAppError(err)) throw err;
    return [err.code, err.reason, err.errors?.[0]?.pointer].filter(Boolean).join(' ');
  }
  return 'resolved';
}

void t.test('the service refuses numbers no JSON schema should have let through', async (t) => {
  const { ledger, principal, tdb } = await setup(t);
  for (const bad of [Number.NaN, 1.5, -1, MAX_MINOR_UNITS + 1, Number.POSITIVE_INFINITY]) {
    t.match(
      await refusal(ledger.openAccount(principal, { name: 'a', openingBalance: bad })),
      /^validation_failed #body\/opening_balance$/,
      String(bad),
    );
  }
  const a = await ledger.openAccount(principal, { name: 'a', openingBalance: 10 });
  const b = await ledger.openAccount(principal, { name: 'b', openingBalance: 10 });
  for (const bad of [0, -1, 0.5, Number.NaN, MAX_MINOR_UNITS + 2]) {
    t.equal(
      await refusal(
        ledger.transfer(principal, { fromAccountId: a.id, toAccountId: b.id, amount: bad }),
      ),
      'validation_failed #body/amount',
      String(bad),
    );
  }
  t.equal(
    await refusal(ledger.openAccount(principal, { name: 'x'.repeat(300), openingBalance: 1 })),
    'validation_failed #body/name',
    'a very long name is refused without counting it',
  );
  t.equal(
    await refusal(
      ledger.openAccount(principal, { name: '\u{1F600}'.repeat(100), openingBalance: 1 }),
    ),
    'resolved',
    'lengths count code points, as the column does',
  );
  const [row] = await tdb.owner<{ n: string }[]>`select count(*)::text as n from ledger_accounts`;
  t.equal(row?.n, '3');
});

void t.test('checks run in their documented order', async (t) => {
  const { ledger, principal } = await setup(t);
  const a = await ledger.openAccount(principal, { name: 'a', openingBalance: 10 });
  const unknown = newId();
  t.equal(
    await refusal(
      ledger.transfer(principal, { fromAccountId: unknown, toAccountId: unknown, amount: 1 }),
    ),
    'unprocessable same_account #body/to_account_id',
    'same_account comes before looking the accounts up',
  );
  t.equal(
    await refusal(ledger.transfer(principal, { fromAccountId: 'x', toAccountId: 'y', amount: 1 })),
    'not_found #body/from_account_id',
    'an id that is no UUIDv7 names no account',
  );
  t.equal(
    await refusal(
      ledger.transfer(principal, { fromAccountId: a.id, toAccountId: unknown, amount: 11 }),
    ),
    'not_found #body/to_account_id',
    'not_found comes before insufficient_funds',
  );
  t.equal(
    await refusal(
      ledger.renameAccount(principal, unknown, { name: 'x', precondition: { kind: 'missing' } }),
    ),
    'not_found',
    'not_found comes before precondition_required',
  );
  t.equal(
    await refusal(
      ledger.renameAccount(principal, a.id, { name: '', precondition: { kind: 'any' } }),
    ),
    'validation_failed #body/name',
    'a bad name comes first',
  );
  t.equal(
    await refusal(
      ledger.renameAccount(principal, a.id, { name: 'b', precondition: { kind: 'any' } }),
    ),
    'precondition_required #header/If-Match',
  );
  t.equal(
    await refusal(
      ledger.renameAccount(principal, a.id, {
        name: 'b',
        precondition: { kind: 'versions', versions: [] },
      }),
    ),
    'precondition_failed',
  );
  t.equal(await refusal(ledger.getTransfer(principal, unknown)), 'not_found');
});

void t.test('two renames from the same version: exactly one wins, the other is 412', async (t) => {
  const { ledger, principal } = await setup(t);
  const a = await ledger.openAccount(principal, { name: 'a', openingBalance: 10 });
  const rename = (name: string) =>
    refusal(
      ledger.renameAccount(principal, a.id, {
        name,
        precondition: { kind: 'versions', versions: [1] },
      }),
    );
  const outcomes = await Promise.all(['x', 'y', 'z', 'w'].map(rename));
  t.same([...outcomes].sort(), [
    'precondition_failed',
    'precondition_failed',
    'precondition_failed',
    'resolved',
  ]);
  const now = await ledger.getAccount(principal, a.id);
  t.equal(now.version, 2, 'one change, one version');
});

void t.test('adapters that write refuse to run outside a unit of work', async (t) => {
  const { accounts, principal } = await setup(t);
  const at = new Date();
  const id = newId();
  await t.rejects(
    accounts.insert({ id, principalId: principal, name: 'a', openingBalance: 0, createdAt: at }),
    TransactionRequiredError,
  );
  await t.rejects(
    accounts.rename(principal, id, { name: 'b', versions: [1], at }),
    TransactionRequiredError,
  );
  await t.rejects(
    accounts.transfer(
      principal,
      { id: newId(), fromAccountId: id, toAccountId: newId(), amount: 1, at },
      MAX_MINOR_UNITS,
    ),
    TransactionRequiredError,
  );
});

void t.test('the transfer statement writes only when every check holds', async (t) => {
  const { accounts, uow, principal, ledger, tdb } = await setup(t);
  const a = await ledger.openAccount(principal, { name: 'a', openingBalance: 10 });
  const b = await ledger.openAccount(principal, { name: 'b', openingBalance: 5 });
  const other = newId();
  const state = async () => {
    const rows = await tdb.owner<{ id: string; balance: string; version: string }[]>`
      select id, balance::text as balance, version::text as version
        from ledger_accounts where id in (${a.id}, ${b.id}) order by id`;
    const [count] = await tdb.owner<{ n: string }[]>`
      select count(*)::text as n from ledger_transfers`;
    return { rows, transfers: count?.n };
  };
  const before = await state();
  const attempt = (from: string | null, to: string | null, amount: number, max = MAX_MINOR_UNITS) =>
    uow.run(() =>
      accounts.transfer(
        principal,
        {
          id: newId(),
          fromAccountId: from as never,
          toAccountId: to as never,
          amount,
          at: new Date(),
        },
        max,
      ),
    );
  t.same(await attempt(other, b.id, 1), { from: false, to: true, funds: false, room: true });
  t.same(await attempt(a.id, null, 1), { from: true, to: false, funds: true, room: false });
  t.same(await attempt(a.id, b.id, 11), { from: true, to: true, funds: false, room: true });
  t.same(await attempt(a.id, b.id, 1, 5), { from: true, to: true, funds: true, room: false });
  t.same(await state(), before, 'a failed check wrote nothing');
  t.same(await attempt(b.id, a.id, 5, 15), { from: true, to: true, funds: true, room: true });
  const after = await state();
  t.same(
    after.rows.map((r) => [r.balance, r.version]),
    a.id < b.id
      ? [
          ['15', '2'],
          ['0', '2'],
        ]
      : [
          ['0', '2'],
          ['15', '2'],
        ],
    'both balances moved and both versions on by one',
  );
  t.equal(after.transfers, '1', 'and the transfer recorded');
  // Another principal's account is neither checked nor touched.
  const mallory = newId();
  const stranger = await uow.run(() =>
    accounts.transfer(
      mallory,
      { id: newId(), fromAccountId: a.id, toAccountId: b.id, amount: 1, at: new Date() },
      MAX_MINOR_UNITS,
    ),
  );
  t.same(stranger, { from: false, to: false, funds: false, room: false });
  t.same(await state(), after);
});

void t.test('toMinorUnits reads only non-negative safe integers', (t) => {
  t.equal(toMinorUnits('0'), 0);
  t.equal(toMinorUnits('9007199254740991'), MAX_MINOR_UNITS);
  for (const bad of ['9007199254740992', '-1', '1.5', '', '1e3', ' 1']) {
    t.throws(() => toMinorUnits(bad), RangeError, JSON.stringify(bad));
  }
  t.end();
});
