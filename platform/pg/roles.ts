/**
 * Cluster bootstrap for servers we manage ourselves (the embedded server and
 * the test harness): the owner role that runs migrations, the application
 * role the server connects as, and the database. Roles are cluster-wide, so
 * every step is idempotent and tolerates a concurrent twin.
 */
import type { Sql } from './client.js';

/** A login role and its password. */
export interface RoleSpec {
  readonly name: string;
  readonly password: string;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Checks that a role or database name is a plain lower-case identifier, so it
 * can be used unquoted in migrations' placeholders.
 *
 * @param kind what the name is, for the message.
 * @param name the name.
 * @returns the name.
 * @throws Error naming the bad value.
 */
export function assertIdentifier(kind: string, name: string): string {
  if (!IDENTIFIER.test(name)) {
    throw new Error(`${kind} "${name}" must match ${IDENTIFIER.source}`);
  }
  return name;
}

/**
 * Creates a login role, or resets its password when it exists. The password
 * travels as a bind parameter into a session setting and from there into
 * `format('%L')`, because utility statements take no bind parameters.
 *
 * @param admin a superuser pool.
 * @param role name and password.
 * @throws Error from PostgreSQL other than a lost creation race.
 */
export async function ensureLoginRole(admin: Sql, role: RoleSpec): Promise<void> {
  assertIdentifier('role name', role.name);
  for (let attempt = 0; ; attempt++) {
    try {
      await admin.begin(async (tx) => {
        await tx`select set_config('bootstrap.role', ${role.name}, true), set_config('bootstrap.password', ${role.password}, true)`;
        await tx`
          do $$
          begin
            if exists (select from pg_roles where rolname = current_setting('bootstrap.role')) then
              execute format('alter role %I login password %L', current_setting('bootstrap.role'), current_setting('bootstrap.password'));
            else
              execute format('create role %I login password %L', current_setting('bootstrap.role'), current_setting('bootstrap.password'));
            end if;
          end $$`;
      });
      return;
    } catch (err) {
      // Two processes creating the same role: the loser sees a unique
      // violation on pg_authid and simply tries again as an ALTER.
      if (attempt < 2 && (err as { code?: string }).code === '23505') continue;
      throw err;
    }
  }
}

/**
 * Creates a database owned by a role unless it exists.
 *
 * @param admin a superuser pool.
 * @param name database name.
 * @param owner owning role.
 * @param template optional template database to clone.
 */
export async function ensureDatabase(
  admin: Sql,
  name: string,
  owner: string,
  template?: string,
): Promise<void> {
  assertIdentifier('database name', name);
  const found = await admin`select 1 from pg_database where datname = ${name}`;
  if (found.length > 0) return;
  try {
    if (template === undefined) {
      await admin`create database ${admin(name)} owner ${admin(owner)}`;
    } else {
      await admin`create database ${admin(name)} owner ${admin(owner)} template ${admin(template)}`;
    }
  } catch (err) {
    if ((err as { code?: string }).code !== '42P04') throw err;
  }
}

/**
 * Drops a database, terminating its sessions.
 *
 * @param admin a superuser pool connected to another database.
 * @param name database name.
 */
export async function dropDatabase(admin: Sql, name: string): Promise<void> {
  assertIdentifier('database name', name);
  await admin`drop database if exists ${admin(name)} with (force)`;
}
