/**
 * The PostgreSQL cluster of one tap run: where it is, how to reach it as
 * superuser, and the roles and template database every test file clones.
 *
 * The tap `before` script (global-setup.ts) provides it and writes its state to
 * a file keyed by the tap runner's pid; the test files (children of the same
 * runner) read that file; the `after` script tears it down.
 *
 * Providers, chosen by environment variable:
 * - default: an embedded PostgreSQL 18 in a temporary folder;
 * - `TEST_DATABASE_URL=postgres://admin@host/db`: any running server, as a
 *   role that may create roles and databases;
 * - `TEST_PG=container`: a PostgreSQL 18 container through
 *   @testcontainers/postgresql where a Docker engine exists.
 */
import os from 'node:os';
import path from 'node:path';

/** What the before script hands to the test files. */
export interface HarnessState {
  readonly provider: 'embedded' | 'url' | 'container';
  /** Superuser (or CREATEROLE/CREATEDB) URL on the maintenance database. */
  readonly adminUrl: string;
  /** The embedded cluster's folder, when provider is embedded. */
  readonly embeddedRoot?: string;
  /** The container's id, when provider is container. */
  readonly containerId?: string;
  /** The migrated database every test database is cloned from. */
  readonly templateDatabase: string;
  readonly owner: { readonly name: string; readonly password: string };
  readonly app: { readonly name: string; readonly password: string };
}

/** Role names shared by every test run on a cluster (roles are cluster-wide). */
export const TEST_OWNER_ROLE = 'app_test_owner';
/** The application role of tests. */
export const TEST_APP_ROLE = 'app_test_user';

/**
 * The state file of the tap run this process belongs to. The before script,
 * the after script and every test file are children of the same tap runner,
 * so its pid names the run.
 *
 * @returns an absolute path under the OS temp folder.
 */
export function stateFile(): string {
  return path.join(os.tmpdir(), `app-test-pg-${String(process.ppid)}.json`);
}

/** How to run tests when no database is reachable: part of every harness error. */
export const HOW_TO_PROVIDE =
  'Run the tests through tap (`make test`, or `npx tap <file>`), whose before script starts an embedded ' +
  'PostgreSQL 18; or set TEST_DATABASE_URL to an admin URL of a running PostgreSQL 17+ server; or set ' +
  'TEST_PG=container where a Docker engine runs.';
