/**
 * Which PostgreSQL the process talks to: the server named by `database.url`,
 * or, when that is empty, the embedded PostgreSQL 18 kept in
 * `database.embedded_data_dir` with an owner role, an application role and a
 * database made for it on first start.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { ConfigError } from '../config/index.js';
import { createSql } from './client.js';
import { EmbeddedPostgres } from './embedded.js';
import { ensureDatabase, ensureLoginRole, type RoleSpec } from './roles.js';

/** The database settings this module reads (a slice of the configuration). */
export interface DatabaseSettings {
  readonly url: string;
  readonly owner_url: string;
  readonly embedded_data_dir: string;
  readonly embedded_port: number;
}

/** Where to connect, as which roles, and how to let go. */
export interface DatabaseTarget {
  /** URL as the application role: what the server's pool uses. */
  readonly appUrl: string;
  /** URL as the owner role, for migrations; undefined when not configured. */
  readonly ownerUrl: string | undefined;
  /** The application role's name, granted privileges by migrations. */
  readonly appRole: string;
  /**
   * The embedded server in use: started by this process, or (with
   * `shareRunning`) the one another process started and shares.
   */
  readonly embedded: EmbeddedPostgres | undefined;
  /** Stops the embedded server, if any. Safe to call twice. */
  close(): Promise<void>;
}

/** Database name, owner and application roles of the embedded server. */
export const EMBEDDED_DATABASE = 'app';
const OWNER_ROLE = 'app_owner';
const APP_ROLE = 'app_user';

/** Options of {@link openDatabase}. */
export interface OpenDatabaseOptions {
  /**
   * Use the embedded server another live process (a running `serve`) has
   * started on the same folder, instead of refusing: for short admin
   * commands (`migrate`, `principal create`). Such a target's `close()`
   * leaves the server running; its holder stops it. A server process never
   * shares: the one that starts the embedded server is the one that stops it.
   */
  readonly shareRunning?: boolean;
  /**
   * The URLs node-postgres will connect with, each mapped to who uses it
   * (for the message): graphile-worker (roles `worker` and `all`) uses
   * `database.url`, migrations use `database.owner_url`. node-postgres takes
   * one host, so a host list there is refused at start; postgres.js (every
   * other pool) takes the list.
   */
  readonly singleHost?: { readonly url?: string; readonly owner_url?: string };
}

/**
 * Resolves the database target, starting the embedded server when no URL is
 * configured (or, with `shareRunning`, using the one already running there).
 *
 * @param settings the `database` group of the configuration.
 * @param options whether a running embedded server may be shared, and which
 *   URLs must name one host.
 * @returns the target; call `close()` at shutdown.
 * @throws Error when `database.url` is not a postgres URL or the embedded
 *   server cannot start; EmbeddedInUseError when another process holds it;
 *   ConfigError when a URL named in `options.singleHost` has several hosts.
 */
export async function openDatabase(
  settings: DatabaseSettings,
  options: OpenDatabaseOptions = {},
): Promise<DatabaseTarget> {
  if (settings.url !== '') {
    const appRole = roleOf('database.url', settings.url);
    if (settings.owner_url !== '') roleOf('database.owner_url', settings.owner_url);
    const { url: worker, owner_url: migrations } = options.singleHost ?? {};
    if (worker !== undefined) assertSingleHost('database.url', settings.url, worker);
    if (migrations !== undefined && settings.owner_url !== '') {
      assertSingleHost('database.owner_url', settings.owner_url, migrations);
    }
    return {
      appUrl: settings.url,
      ownerUrl: settings.owner_url === '' ? undefined : settings.owner_url,
      appRole,
      embedded: undefined,
      close: () => Promise.resolve(),
    };
  }
  const rootDir = path.resolve(settings.embedded_data_dir);
  const running = options.shareRunning ? await EmbeddedPostgres.running(rootDir) : undefined;
  if (running !== undefined) {
    // Its holder made the roles and the database before it shared the
    // server: read them, never make them here.
    const roles = await embeddedRoles(rootDir, { create: false });
    return {
      appUrl: running.urlFor(roles.app.name, roles.app.password, EMBEDDED_DATABASE),
      ownerUrl: running.urlFor(roles.owner.name, roles.owner.password, EMBEDDED_DATABASE),
      appRole: roles.app.name,
      embedded: running,
      close: () => Promise.resolve(),
    };
  }
  const pg = await EmbeddedPostgres.start({ rootDir, port: settings.embedded_port });
  try {
    const roles = await embeddedRoles(rootDir);
    const admin = createSql(pg.adminUrl(), { max: 1, applicationName: 'bootstrap' });
    try {
      await ensureLoginRole(admin, roles.owner);
      await ensureLoginRole(admin, roles.app);
      await ensureDatabase(admin, EMBEDDED_DATABASE, roles.owner.name);
    } finally {
      await admin.end();
    }
    let closed = false;
    return {
      appUrl: pg.urlFor(roles.app.name, roles.app.password, EMBEDDED_DATABASE),
      ownerUrl: pg.urlFor(roles.owner.name, roles.owner.password, EMBEDDED_DATABASE),
      appRole: roles.app.name,
      embedded: pg,
      close: async () => {
        if (closed) return;
        closed = true;
        await pg.stop('fast');
      },
    };
  } catch (err) {
    await pg.stop('fast');
    throw err;
  }
}

function roleOf(key: string, url: string): string {
  return parsePostgresUrl(key, url).user;
}

/** The `target_session_attrs` values postgres.js 3.4.9 takes (libpq's `any` is not one). */
const SESSION_ATTRS = ['read-write', 'read-only', 'primary', 'standby', 'prefer-standby'];

/** A postgres:// URL taken apart the way postgres.js reads it. */
export interface PostgresUrl {
  /** The hosts as written, in order: `host` or `host:port` (IPv6 in brackets). */
  readonly hosts: readonly string[];
  /** The user, decoded. */
  readonly user: string;
  /** The URL with its first host in place of the host list (user, password, database, parameters). */
  readonly url: URL;
}

/**
 * Reads a PostgreSQL connection URL that may name several hosts
 * (`postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write`), as
 * postgres.js does: the host list between the last `@` of the authority and
 * the path is split at its commas, and the rest is parsed as a URL with the
 * first host in place of the list (the WHATWG URL parser takes one host).
 *
 * @param key the configuration key, for messages.
 * @param url the URL.
 * @returns its hosts, user and the rest.
 * @throws Error starting `Invalid configuration:` naming the key when it is
 *   not a URL, not postgres:// or postgresql://, names no user, has an
 *   empty entry in its host list, or asks for a `target_session_attrs`
 *   postgres.js does not take.
 */
export function parsePostgresUrl(key: string, url: string): PostgresUrl {
  const notUrl = (): Error => new Error(`Invalid configuration: ${key} is not a URL`);
  const scheme = /^([a-z][a-z0-9+.-]*:)\/\//i.exec(url);
  if (scheme === null) throw notUrl();
  const protocol = (scheme[1] ?? '').toLowerCase();
  if (protocol !== 'postgres:' && protocol !== 'postgresql:') {
    throw new Error(
      `Invalid configuration: ${key} must be a postgres:// URL, got protocol "${protocol}"`,
    );
  }
  const start = scheme[0].length;
  const end = url.slice(start).search(/[/?#]/);
  const authority = end === -1 ? url.slice(start) : url.slice(start, start + end);
  const at = authority.lastIndexOf('@');
  const hostList = authority.slice(at + 1);
  const hosts = hostList.split(',');
  if (hosts.some((h) => h === '')) {
    throw new Error(
      `Invalid configuration: ${key} has an empty entry in its host list "${hostList}"`,
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(
      url.slice(0, start + at + 1) + (hosts[0] ?? '') + url.slice(start + authority.length),
    );
    // Every other host must be one the URL parser takes too.
    for (const h of hosts.slice(1)) new URL(`postgres://${h}`);
  } catch {
    throw notUrl();
  }
  const user = decodeURIComponent(parsed.username);
  if (user === '') throw new Error(`Invalid configuration: ${key} must name a user`);
  const attrs = parsed.searchParams.get('target_session_attrs');
  // An empty value is no value to postgres.js, as to libpq.
  if (attrs !== null && attrs !== '' && !SESSION_ATTRS.includes(attrs)) {
    // postgres.js would throw this at the pool's creation, with a stack.
    throw new Error(
      `Invalid configuration: ${key} asks for target_session_attrs "${attrs}"; postgres.js takes ${SESSION_ATTRS.join(', ')}`,
    );
  }
  return { hosts, user, url: parsed };
}

/**
 * Refuses a host list in a URL that node-postgres connects with
 * (graphile-worker, graphile-migrate): it takes one host, and reads a list
 * as a host name that does not resolve, or fails on it as an invalid URL.
 */
function assertSingleHost(
  key: 'database.url' | 'database.owner_url',
  url: string,
  who: string,
): void {
  const { hosts } = parsePostgresUrl(key, url);
  if (hosts.length === 1) return;
  throw new ConfigError([
    {
      key,
      source: 'configuration',
      message: `${key} names ${String(hosts.length)} hosts (${hosts.join(',')}), but ${who} connects with node-postgres, which takes one host: give ${key} one address that follows the primary (a virtual IP or a proxy)`,
    },
  ]);
}

async function embeddedRoles(
  rootDir: string,
  options: { readonly create: boolean } = { create: true },
): Promise<{ owner: RoleSpec; app: RoleSpec }> {
  const file = path.join(rootDir, 'roles.json');
  try {
    return JSON.parse(await fs.readFile(file, 'utf8')) as { owner: RoleSpec; app: RoleSpec };
  } catch (err) {
    if (!options.create) {
      throw new Error(`cannot read ${file} of the running embedded PostgreSQL`, { cause: err });
    }
    const roles = {
      owner: { name: OWNER_ROLE, password: randomBytes(18).toString('base64url') },
      app: { name: APP_ROLE, password: randomBytes(18).toString('base64url') },
    };
    await fs.writeFile(file, JSON.stringify(roles), { mode: 0o600 });
    return roles;
  }
}
