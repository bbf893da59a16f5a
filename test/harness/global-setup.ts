/**
 * tap `before` script: provides one PostgreSQL for the whole run, creates the
 * test roles, migrates a template database once and writes the harness state
 * for the test files. Runs once per `tap` invocation.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createSql } from '../../platform/pg/client.js';
import { EmbeddedPostgres } from '../../platform/pg/embedded.js';
import { ensureDatabase, ensureLoginRole } from '../../platform/pg/roles.js';
import { runMigrations } from '../../platform/migrate/index.js';
import {
  HOW_TO_PROVIDE,
  stateFile,
  TEST_APP_ROLE,
  TEST_OWNER_ROLE,
  type HarnessState,
} from './cluster.js';

async function provide(): Promise<
  Pick<HarnessState, 'provider' | 'adminUrl' | 'embeddedRoot' | 'containerId'>
> {
  const url = process.env['TEST_DATABASE_URL'];
  if (url !== undefined && url !== '') return { provider: 'url', adminUrl: url };
  if (process.env['TEST_PG'] === 'container') {
    const moduleName = '@testcontainers/postgresql';
    let mod: {
      PostgreSqlContainer: new (image: string) => {
        start(): Promise<{ getConnectionUri(): string; getId(): string }>;
      };
    };
    try {
      mod = (await import(moduleName)) as typeof mod;
    } catch {
      throw new Error(
        `TEST_PG=container needs ${moduleName}: npm install --no-save ${moduleName}@12.0.1 testcontainers@12.0.1`,
      );
    }
    const container = await new mod.PostgreSqlContainer('postgres:18').start();
    return {
      provider: 'container',
      adminUrl: container.getConnectionUri(),
      containerId: container.getId(),
    };
  }
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'app-test-pg-'));
  const pg = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true });
  return { provider: 'embedded', adminUrl: pg.adminUrl(), embeddedRoot: root };
}

const started = Date.now();
const base = await provide().catch((err: unknown) => {
  throw new Error(`No PostgreSQL for the tests: ${(err as Error).message}\n${HOW_TO_PROVIDE}`);
});
const admin = createSql(base.adminUrl, { max: 1, applicationName: 'test-harness' });
try {
  // Passwords are per run; an existing role (from an earlier run on a shared
  // server) gets the new one.
  const owner = { name: TEST_OWNER_ROLE, password: randomBytes(18).toString('base64url') };
  const app = { name: TEST_APP_ROLE, password: randomBytes(18).toString('base64url') };
  await ensureLoginRole(admin, owner);
  await ensureLoginRole(admin, app);
  const templateDatabase = `test_template_${randomBytes(5).toString('hex')}`;
  await ensureDatabase(admin, templateDatabase, owner.name);
  const ownerUrl = new URL(base.adminUrl);
  ownerUrl.username = owner.name;
  ownerUrl.password = owner.password;
  ownerUrl.pathname = `/${templateDatabase}`;
  await runMigrations({ ownerUrl: ownerUrl.toString(), appRole: app.name });
  // graphile-migrate closes its pool about 200 ms after use; a clone of the
  // template must not race its last connection.
  await new Promise((resolve) => setTimeout(resolve, 300));
  await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${templateDatabase} and pid <> pg_backend_pid()`;
  const state: HarnessState = { ...base, templateDatabase, owner, app };
  await fs.writeFile(stateFile(), JSON.stringify(state), { mode: 0o600 });
  console.log(`# test PostgreSQL (${base.provider}) ready in ${String(Date.now() - started)} ms`);
} finally {
  await admin.end();
}
