/**
 * Per-test-file databases: each call clones the run's migrated template into
 * a database of its own and drops it when the test ends, so test files never
 * see each other's rows and can run in parallel.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import type { Test } from 'tap';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { dropDatabase, ensureDatabase } from '../../platform/pg/roles.js';
import { HOW_TO_PROVIDE, stateFile, type HarnessState } from './cluster.js';

/** A throwaway database cloned from the migrated template, with pools for each role. */
export interface TestDatabase {
  /** Its name. */
  readonly name: string;
  /** URL as the application role (what the server connects as). */
  readonly appUrl: string;
  /** URL as the owner role (what migrations run as). */
  readonly ownerUrl: string;
  /** URL as the harness's admin on this database. */
  readonly adminUrl: string;
  /** A pool as the application role, ended at teardown. */
  readonly app: Sql;
  /** A pool as the owner role, ended at teardown. */
  readonly owner: Sql;
  /** The harness state (roles, template) of this run. */
  readonly state: HarnessState;
}

/**
 * Reads the state the tap before script wrote for this run.
 *
 * @returns the state.
 * @throws Error saying how to provide a database when there is none.
 */
export async function harnessState(): Promise<HarnessState> {
  try {
    return JSON.parse(await fs.readFile(stateFile(), 'utf8')) as HarnessState;
  } catch {
    throw new Error(
      `No test PostgreSQL is running for this run (${stateFile()} is missing). ${HOW_TO_PROVIDE}`,
    );
  }
}

function withDatabase(
  url: string,
  database: string,
  user?: { name: string; password: string },
): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  if (user) {
    u.username = user.name;
    u.password = user.password;
  }
  return u.toString();
}

/**
 * Creates a fresh database for the calling test, cloned from the template.
 *
 * @param t the tap test whose teardown drops the database.
 * @returns URLs and pools for it.
 */
export async function testDatabase(t: Test): Promise<TestDatabase> {
  const state = await harnessState();
  const name = `${state.templateDatabase.replace('template', 'file')}_${randomBytes(4).toString('hex')}`;
  const admin = createSql(state.adminUrl, { max: 1, applicationName: 'test-harness' });
  await ensureDatabase(admin, name, state.owner.name, state.templateDatabase);
  const appUrl = withDatabase(state.adminUrl, name, state.app);
  const ownerUrl = withDatabase(state.adminUrl, name, state.owner);
  const app = createSql(appUrl, { max: 4, applicationName: 'test-app' });
  const owner = createSql(ownerUrl, { max: 2, applicationName: 'test-owner' });
  t.teardown(async () => {
    await Promise.all([app.end({ timeout: 1 }), owner.end({ timeout: 1 })]);
    await dropDatabase(admin, name);
    await admin.end();
  });
  return {
    name,
    appUrl,
    ownerUrl,
    adminUrl: withDatabase(state.adminUrl, name),
    app,
    owner,
    state,
  };
}
