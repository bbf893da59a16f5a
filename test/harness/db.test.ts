import t from 'tap';
import { testDatabase } from './db.js';

void t.test('each test database is isolated from another', async (t) => {
  const a = await testDatabase(t);
  const b = await testDatabase(t);
  t.not(a.name, b.name);
  await a.owner`create table isolation_probe (v int)`;
  await a.owner`insert into isolation_probe values (1)`;
  const inA = await a.owner`select to_regclass('isolation_probe') as r`;
  const inB = await b.owner`select to_regclass('isolation_probe') as r`;
  t.equal(inA[0]?.['r'], 'isolation_probe');
  t.equal(inB[0]?.['r'], null, 'a table made in one database is absent from another');
});

void t.test('the application role cannot run DDL', async (t) => {
  const db = await testDatabase(t);
  await t.rejects(
    db.app`create table app_ddl_probe (v int)`,
    { code: '42501' },
    'create table is refused',
  );
  await t.rejects(
    db.app`create schema app_ddl_schema`,
    { code: '42501' },
    'create schema is refused',
  );
  const [row] = await db.app<{ u: string }[]>`select current_user as u`;
  t.equal(row?.u, db.state.app.name, 'connected as the application role');
});

void t.test('the template carries the committed migrations', async (t) => {
  const db = await testDatabase(t);
  const rows = await db.owner<
    { filename: string }[]
  >`select filename from graphile_migrate.migrations order by filename`;
  t.ok(rows.length >= 1, 'at least the grants scheme is applied');
  t.equal(rows[0]?.filename, '000001.sql');
});
