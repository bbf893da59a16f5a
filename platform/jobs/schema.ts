/**
 * graphile-worker's database schema: installed and upgraded by the owner role
 * with graphile-worker's own migrations, then opened to the application role
 * for exactly what adding jobs and running the worker need.
 */
import { runMigrations } from 'graphile-worker';
import { createSql } from '../pg/client.js';
import { assertIdentifier } from '../pg/roles.js';
import type { Logger } from '../log/index.js';
import { createWorkerPool, graphileLogger } from './connection.js';

/** The schema graphile-worker lives in; set explicitly so no environment variable can move it. */
export const WORKER_SCHEMA = 'graphile_worker';

/**
 * graphile-worker 0.18's tables with row level security enabled and no
 * policy: invisible to any role but their owner until a policy admits it.
 */
const RLS_TABLES = [
  '_private_jobs',
  '_private_job_queues',
  '_private_tasks',
  '_private_known_crontabs',
] as const;

/** Options of {@link installWorkerSchema}. */
export interface InstallWorkerSchemaOptions {
  /** Receives graphile-worker's migration messages; silent when absent. */
  readonly logger?: Logger;
}

/**
 * Installs or upgrades graphile-worker's schema and grants the application
 * role what it needs. Idempotent: a re-run applies nothing and changes no
 * privilege; concurrent runs are serialized.
 *
 * Privileges, from reading graphile-worker 0.18's SQL (sql/*.sql and the
 * queries in dist/): the worker selects graphile_worker.migrations at start;
 * locks, completes and fails jobs by updating and deleting
 * `_private_jobs` and updating `_private_job_queues`; registers task
 * identifiers in `_private_tasks` and cron items in `_private_known_crontabs`;
 * and adds jobs through `add_job`/`add_jobs`, which run as the caller
 * (SECURITY INVOKER) and insert into the tables themselves. Row level security
 * is enabled on the `_private_*` tables without policies, so each gets a
 * permissive policy for the application role alone; the grants remain the
 * limit. Nothing is granted on the `jobs` view (operators read it as owner),
 * and no DDL: the schema is created and altered by the owner only.
 *
 * @param ownerUrl connection URL of the role that owns the database.
 * @param appRole the login role the server connects as.
 * @param options optional logger.
 * @throws Error when the role name is not a plain identifier, a migration
 *   fails, or the owner may not grant on the schema (it was installed by
 *   another role).
 */
export async function installWorkerSchema(
  ownerUrl: string,
  appRole: string,
  options: InstallWorkerSchemaOptions = {},
): Promise<void> {
  assertIdentifier('application role', appRole);
  const pool = createWorkerPool(ownerUrl, {
    max: 1,
    applicationName: 'worker-schema-install',
    ...(options.logger === undefined ? {} : { logger: options.logger }),
  });
  try {
    await runMigrations({
      pgPool: pool,
      schema: WORKER_SCHEMA,
      logger: graphileLogger(options.logger),
    });
  } finally {
    await pool.end();
  }
  const sql = createSql(ownerUrl, { max: 1, applicationName: 'worker-schema-install' });
  try {
    await sql.begin(async (tx) => {
      // Concurrent GRANTs on one object fail with "tuple concurrently
      // updated", and concurrent policy checks could both create.
      await tx`select pg_advisory_xact_lock(hashtext('platform.jobs.install_worker_schema'))`;
      const role = tx(appRole);
      const schema = tx(WORKER_SCHEMA);
      await tx`grant usage on schema ${schema} to ${role}`;
      await tx`grant select on ${schema}.migrations to ${role}`;
      await tx`grant select, insert, update, delete on ${schema}._private_jobs to ${role}`;
      await tx`grant select, insert, update on ${schema}._private_job_queues to ${role}`;
      await tx`grant select, insert on ${schema}._private_tasks to ${role}`;
      await tx`grant select, insert, update on ${schema}._private_known_crontabs to ${role}`;
      await tx`grant execute on all functions in schema ${schema} to ${role}`;
      for (const table of RLS_TABLES) {
        const found = await tx`
          select 1 from pg_policies
          where schemaname = ${WORKER_SCHEMA} and tablename = ${table} and ${appRole}::name = any(roles)`;
        if (found.length > 0) continue;
        // Role names are at most 63 characters; keep the policy name within
        // PostgreSQL's identifier limit rather than let it be cut with a notice.
        const policy = `app_role_${appRole}`.slice(0, 63);
        await tx`create policy ${tx(policy)} on ${schema}.${tx(table)} for all to ${role} using (true) with check (true)`;
      }
    });
  } finally {
    await sql.end();
  }
}
