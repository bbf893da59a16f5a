import t from 'tap';
import { testDatabase, type TestDatabase } from '../../test/harness/db.js';
import { createLogger } from '../log/index.js';
import { installWorkerSchema, WORKER_SCHEMA } from './schema.js';

/** Everything installWorkerSchema may touch, as text, to compare runs. */
async function catalogue(tdb: TestDatabase): Promise<unknown> {
  return tdb.owner`
    select
      (select nspacl::text from pg_namespace where nspname = 'graphile_worker') as schema_acl,
      (select json_agg(json_build_object('t', relname, 'acl', relacl::text, 'rls', relrowsecurity) order by relname)
         from pg_class where relnamespace = 'graphile_worker'::regnamespace) as relations,
      (select json_agg(json_build_object('f', oid::regprocedure::text, 'acl', proacl::text) order by oid::regprocedure::text)
         from pg_proc where pronamespace = 'graphile_worker'::regnamespace) as functions,
      (select json_agg(json_build_object('t', tablename, 'p', policyname, 'r', roles::text, 'c', cmd) order by tablename, policyname)
         from pg_policies where schemaname = 'graphile_worker') as policies,
      (select json_agg(id order by id) from graphile_worker.migrations) as migrations`;
}

void t.test(
  'installs graphile-worker schema and grants the application role what the worker needs',
  async (t) => {
    const tdb = await testDatabase(t);
    const role = tdb.state.app.name;
    await installWorkerSchema(tdb.ownerUrl, role);
    t.equal(WORKER_SCHEMA, 'graphile_worker');

    const [applied] = await tdb.owner<
      { n: number }[]
    >`select count(*)::int as n from graphile_worker.migrations`;
    t.ok((applied?.n ?? 0) >= 20, 'graphile-worker 0.18 migrations applied');

    const grants = await tdb.owner<{ table_name: string; privileges: string }[]>`
    select table_name, string_agg(privilege_type, ',' order by privilege_type) as privileges
    from information_schema.role_table_grants
    where grantee = ${role} and table_schema = 'graphile_worker'
    group by table_name order by table_name`;
    t.same(grants, [
      { table_name: '_private_job_queues', privileges: 'INSERT,SELECT,UPDATE' },
      { table_name: '_private_jobs', privileges: 'DELETE,INSERT,SELECT,UPDATE' },
      { table_name: '_private_known_crontabs', privileges: 'INSERT,SELECT,UPDATE' },
      { table_name: '_private_tasks', privileges: 'INSERT,SELECT' },
      { table_name: 'migrations', privileges: 'SELECT' },
    ]);

    const [schema] = await tdb.owner<{ usage: boolean; create: boolean }[]>`
    select has_schema_privilege(${role}, 'graphile_worker', 'USAGE') as usage,
           has_schema_privilege(${role}, 'graphile_worker', 'CREATE') as create`;
    t.same(schema, { usage: true, create: false }, 'usage on the schema, no DDL');

    const [fn] = await tdb.owner<{ n: number; executable: number }[]>`
    select count(*)::int as n,
           count(*) filter (where has_function_privilege(${role}, oid, 'EXECUTE'))::int as executable
    from pg_proc where pronamespace = 'graphile_worker'::regnamespace`;
    t.ok((fn?.n ?? 0) > 0);
    t.equal(fn?.executable, fn?.n, 'execute on every function of the schema');

    const policies = await tdb.owner<{ tablename: string; cmd: string }[]>`
    select tablename, cmd from pg_policies
    where schemaname = 'graphile_worker' and ${role}::name = any(roles) order by tablename`;
    t.same(
      policies.map((p) => `${p.tablename}:${p.cmd}`),
      [
        '_private_job_queues:ALL',
        '_private_jobs:ALL',
        '_private_known_crontabs:ALL',
        '_private_tasks:ALL',
      ],
      'a policy for the role on every table with row level security',
    );
  },
);

void t.test('a re-run is a no-op, also when two run at once', async (t) => {
  const tdb = await testDatabase(t);
  const role = tdb.state.app.name;
  await installWorkerSchema(tdb.ownerUrl, role);
  const before = await catalogue(tdb);
  await installWorkerSchema(tdb.ownerUrl, role);
  t.same(await catalogue(tdb), before, 'nothing changed');
  await Promise.all([
    installWorkerSchema(tdb.ownerUrl, role),
    installWorkerSchema(tdb.ownerUrl, role),
  ]);
  t.same(await catalogue(tdb), before, 'nothing changed after concurrent runs');
});

void t.test('the application role gets no DDL and nothing beyond the worker tables', async (t) => {
  const tdb = await testDatabase(t);
  await installWorkerSchema(tdb.ownerUrl, tdb.state.app.name);
  await t.rejects(tdb.app`create table graphile_worker.intruder (id int)`, { code: '42501' });
  await t.rejects(tdb.app`drop table graphile_worker._private_jobs`, { code: '42501' });
  await t.rejects(tdb.app`truncate graphile_worker._private_jobs`, { code: '42501' });
  await t.rejects(tdb.app`delete from graphile_worker.migrations`, { code: '42501' });
  await t.rejects(
    tdb.app`select * from graphile_worker.jobs`,
    { code: '42501' },
    'the jobs view is for operators',
  );
  const [row] = await tdb.app<
    { id: string }[]
  >`select id::text from graphile_worker.add_job('test:direct', queue_name => 'test')`;
  t.ok(row?.id, 'but it may add a job through the function, which row level security lets through');
});

void t.test("graphile-worker's migration messages go to the given logger", async (t) => {
  const tdb = await testDatabase(t);
  const messages: string[] = [];
  const logger = createLogger({
    appName: 'jobs-test',
    level: 'debug',
    stream: {
      write: (line: string) => messages.push(String((JSON.parse(line) as { msg: unknown }).msg)),
    },
  });
  await installWorkerSchema(tdb.ownerUrl, tdb.state.app.name, { logger });
  t.ok(
    messages.some((m) => /migration 000001/.test(m)),
    'the first migration is reported',
  );
  t.ok(
    messages.some((m) => /migration 000020/.test(m)),
    'and the last one',
  );
});

void t.test(
  'a role name that is not a plain identifier is refused before connecting',
  async (t) => {
    await t.rejects(
      installWorkerSchema('postgres://nobody@127.0.0.1:1/none', 'app; drop'),
      /application role/,
    );
  },
);
