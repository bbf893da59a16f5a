import t from 'tap';
import { newId } from '../../../../kernel/ids/index.js';
import { testDatabase } from '../../../../test/harness/db.js';

// The migration read back from pg_catalog: columns, constraints, keys,
// indexes and what the application role may do are part of the contract, so
// they are checked here rather than trusted.

const MAX = '9007199254740991';

void t.test('ledger_accounts and ledger_transfers have the documented columns', async (t) => {
  const tdb = await testDatabase(t);
  const columns = await tdb.owner<
    { table_name: string; column_name: string; data_type: string; is_nullable: string }[]
  >`
    select table_name, column_name, data_type, is_nullable
      from information_schema.columns
     where table_schema = 'public' and table_name in ('ledger_accounts', 'ledger_transfers')
     order by table_name, ordinal_position`;
  t.same(
    columns.map((c) => `${c.table_name}.${c.column_name} ${c.data_type} ${c.is_nullable}`),
    [
      'ledger_accounts.id uuid NO',
      'ledger_accounts.principal_id uuid NO',
      'ledger_accounts.name text NO',
      'ledger_accounts.opening_balance bigint NO',
      'ledger_accounts.balance bigint NO',
      'ledger_accounts.version bigint NO',
      'ledger_accounts.created_at timestamp with time zone NO',
      'ledger_accounts.updated_at timestamp with time zone NO',
      'ledger_transfers.id uuid NO',
      'ledger_transfers.principal_id uuid NO',
      'ledger_transfers.from_account_id uuid NO',
      'ledger_transfers.to_account_id uuid NO',
      'ledger_transfers.amount bigint NO',
      'ledger_transfers.created_at timestamp with time zone NO',
    ],
  );
  const defaults = await tdb.owner<{ n: string }[]>`
    select count(*)::text as n from information_schema.columns
     where table_name in ('ledger_accounts', 'ledger_transfers') and column_default is not null`;
  t.equal(defaults[0]?.n, '0', 'no defaults: every value, times included, comes from the code');
  const constraints = await tdb.owner<{ table: string; def: string }[]>`
    select conrelid::regclass::text as table, pg_get_constraintdef(oid) as def
      from pg_constraint
     where conrelid in ('ledger_accounts'::regclass, 'ledger_transfers'::regclass)
       and contype <> 'n'
     order by 1, 2`;
  const byCodeUnit = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  t.same(
    constraints.map((c) => `${c.table}: ${c.def}`).sort(byCodeUnit),
    [
      'ledger_accounts: CHECK (((char_length(name) >= 1) AND (char_length(name) <= 100)))',
      `ledger_accounts: CHECK (((opening_balance >= 0) AND (opening_balance <= '${MAX}'::bigint)))`,
      'ledger_accounts: CHECK ((balance >= 0))',
      `ledger_accounts: CHECK ((balance <= '${MAX}'::bigint))`,
      'ledger_accounts: CHECK ((version >= 1))',
      'ledger_accounts: FOREIGN KEY (principal_id) REFERENCES principals(id) ON DELETE CASCADE',
      'ledger_accounts: PRIMARY KEY (id)',
      'ledger_accounts: UNIQUE (principal_id, id)',
      `ledger_transfers: CHECK (((amount >= 1) AND (amount <= '${MAX}'::bigint)))`,
      'ledger_transfers: CHECK ((from_account_id <> to_account_id))',
      'ledger_transfers: FOREIGN KEY (principal_id) REFERENCES principals(id) ON DELETE CASCADE',
      'ledger_transfers: FOREIGN KEY (principal_id, from_account_id) REFERENCES ledger_accounts(principal_id, id) ON DELETE CASCADE',
      'ledger_transfers: FOREIGN KEY (principal_id, to_account_id) REFERENCES ledger_accounts(principal_id, id) ON DELETE CASCADE',
      'ledger_transfers: PRIMARY KEY (id)',
    ].sort(byCodeUnit),
    'NOT NULL constraints (PostgreSQL 18 lists them here too) are checked with the columns',
  );
  const indexes = await tdb.owner<{ def: string }[]>`
    select indexdef as def from pg_indexes
     where tablename = 'ledger_transfers' and indexname not like '%pkey'
     order by indexname`;
  t.same(
    indexes.map((i) => i.def.replace(/^.* USING btree /, '')),
    ['(principal_id, from_account_id)', '(principal_id, to_account_id)'],
    'both composite foreign keys (and the cascade) are served by an index',
  );
  const comments = await tdb.owner<{ c: string | null }[]>`
    select obj_description('ledger_accounts'::regclass, 'pg_class') as c
    union all select obj_description('ledger_transfers'::regclass, 'pg_class')`;
  t.ok(
    comments.every((c) => /retention durable/.test(c.c ?? '')),
    'both tables carry a comment naming the retention class',
  );
});

void t.test('the application role holds exactly the privileges the code uses', async (t) => {
  const tdb = await testDatabase(t);
  const app = tdb.state.app.name;
  const tablePrivileges = await tdb.owner<{ table_name: string; privilege_type: string }[]>`
    select table_name, privilege_type from information_schema.role_table_grants
     where grantee = ${app} and table_name in ('ledger_accounts', 'ledger_transfers')
     order by table_name, privilege_type`;
  t.same(
    tablePrivileges.map((p) => `${p.table_name} ${p.privilege_type}`),
    [
      'ledger_accounts INSERT',
      'ledger_accounts SELECT',
      'ledger_transfers INSERT',
      'ledger_transfers SELECT',
    ],
    'no table-wide UPDATE, DELETE, TRUNCATE, REFERENCES or TRIGGER',
  );
  const columnUpdates = await tdb.owner<{ table_name: string; column_name: string }[]>`
    select table_name, column_name from information_schema.column_privileges
     where grantee = ${app} and privilege_type = 'UPDATE'
       and table_name in ('ledger_accounts', 'ledger_transfers')
     order by table_name, column_name`;
  t.same(
    columnUpdates.map((c) => `${c.table_name}.${c.column_name}`),
    [
      'ledger_accounts.balance',
      'ledger_accounts.name',
      'ledger_accounts.updated_at',
      'ledger_accounts.version',
    ],
    'an account changes only its name, balance, version and time of change; a transfer never',
  );
});

void t.test('the constraints refuse what the code never writes', async (t) => {
  const tdb = await testDatabase(t);
  const alice = newId();
  const bob = newId();
  for (const [id, name] of [
    [alice, 'Alice'],
    [bob, 'Bob'],
  ] as const) {
    await tdb.owner`insert into principals (id, kind, display_name) values (${id}, 'user', ${name})`;
  }
  const at = new Date('2030-01-01T00:00:00Z');
  const account = (principal: string, opening: string, name = 'a') => {
    const id = newId();
    return {
      id,
      insert: tdb.owner`
        insert into ledger_accounts
               (id, principal_id, name, opening_balance, balance, version, created_at, updated_at)
        values (${id}, ${principal}, ${name}, ${opening}::bigint, ${opening}::bigint, 1, ${at}, ${at})`,
    };
  };
  await t.rejects(account(alice, '-1').insert, { code: '23514' }, 'negative balance');
  await t.rejects(account(alice, '9007199254740992').insert, { code: '23514' }, 'beyond 2^53 - 1');
  await t.rejects(account(alice, '1', '').insert, { code: '23514' }, 'empty name');
  await t.rejects(account(alice, '1', 'x'.repeat(101)).insert, { code: '23514' }, 'long name');
  const a = account(alice, MAX);
  await a.insert;
  const b = account(alice, '0');
  await b.insert;
  const bobs = account(bob, '5');
  await bobs.insert;
  await t.rejects(
    tdb.owner`update ledger_accounts set balance = balance + 1 where id = ${a.id}`,
    { code: '23514' },
    'a balance beyond 2^53 - 1',
  );
  await t.rejects(
    tdb.owner`update ledger_accounts set balance = balance - 1 where id = ${b.id}`,
    { code: '23514' },
    'a negative balance',
  );
  await t.rejects(
    tdb.owner`update ledger_accounts set version = 0 where id = ${b.id}`,
    { code: '23514' },
    'version 0',
  );
  const transfer = (principal: string, from: string, to: string, amount: string) => tdb.owner`
    insert into ledger_transfers (id, principal_id, from_account_id, to_account_id, amount, created_at)
    values (${newId()}, ${principal}, ${from}, ${to}, ${amount}::bigint, ${at})`;
  await t.rejects(transfer(alice, a.id, b.id, '0'), { code: '23514' }, 'amount 0');
  await t.rejects(transfer(alice, a.id, a.id, '1'), { code: '23514' }, 'one account on both sides');
  await t.rejects(
    transfer(alice, a.id, bobs.id, '1'),
    { code: '23503' },
    "to another principal's account",
  );
  await t.rejects(
    transfer(bob, bobs.id, a.id, '1'),
    { code: '23503' },
    "from another principal's account",
  );
  await transfer(alice, a.id, b.id, '1');
  await tdb.owner`delete from principals where id = ${alice}`;
  const left = await tdb.owner<{ n: string }[]>`
    select (select count(*) from ledger_accounts where principal_id = ${alice})
         + (select count(*) from ledger_transfers where principal_id = ${alice}) as n`;
  t.equal(left[0]?.n, '0', 'deleting a principal deletes its accounts and transfers');
});
