/**
 * Two PostgreSQL 18 clusters from the embedded binaries, a primary and a
 * streaming standby with synchronous replication, for the failover test.
 *
 * The embedded package ships only initdb, pg_ctl and postgres (no
 * pg_basebackup, no pg_rewind), so a standby is made the way the
 * documentation's low-level base backup describes: between
 * `pg_backup_start()` and `pg_backup_stop()` on one session of the primary,
 * the primary's data folder is copied file by file (without its WAL, which
 * the standby streams, and without the files a base backup leaves out); the
 * `backup_label` that `pg_backup_stop()` returns is written into the copy,
 * with `standby.signal` and a `primary_conninfo` in `postgresql.auto.conf`.
 * The same copy rebuilds an old primary as a standby of the new one after a
 * failover (its own data, which may hold WAL no standby received, is thrown
 * away).
 *
 * Synchronous replication: once the standby streams, the primary gets
 * `synchronous_standby_names` naming it (by `ALTER SYSTEM` and a reload, so
 * it can change without a restart) and `synchronous_commit = on`, so a commit
 * the primary acknowledges is flushed on the standby too. A copy never
 * carries that setting: a promoted standby runs alone (its commits do not
 * wait for a standby that is gone) until a new standby of it streams, as a
 * failover manager's non-strict synchronous mode does.
 *
 * The servers keep durable defaults (fsync and full-page writes on): the
 * failover test's claims are about commits, so nothing here trades them for
 * speed.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { EmbeddedPostgres, resolveBinaries } from '../../platform/pg/embedded.js';

const execFileAsync = promisify(execFile);

/** The replication role every standby connects as. */
export const REPLICATION_ROLE = 'replicator';

/** Server settings of both nodes (command-line settings, fixed for a node's life). */
const NODE_SETTINGS: Readonly<Record<string, string>> = {
  wal_level: 'replica',
  hot_standby: 'on',
  max_wal_senders: '10',
  // The standby streams the WAL from the backup's start on: the primary keeps
  // enough of it (no archive, no slot), even under the test's load.
  wal_keep_size: '1024MB',
  synchronous_commit: 'on',
  // A standby that lost its primary asks again soon (the default is 5 s).
  wal_retrieve_retry_interval: '200ms',
};

/**
 * Entries of a data folder that a base backup leaves out (the
 * documentation's list): the running server's pid and options, WAL (the
 * standby streams it), slots, and folders of runtime state that the server
 * recreates or clears at start.
 */
const EXCLUDED_FILES = new Set([
  'postmaster.pid',
  'postmaster.opts',
  'backup_label',
  'tablespace_map',
  'standby.signal',
  'recovery.signal',
  'current_logfiles',
  'pg_internal.init',
]);
const EMPTIED_FOLDERS = new Set([
  'pg_wal',
  'pg_replslot',
  'pg_dynshmem',
  'pg_notify',
  'pg_serial',
  'pg_snapshots',
  'pg_stat_tmp',
  'pg_subtrans',
]);

/** One cluster of the pair. */
export interface PgNode {
  /** Its name: the standby's `application_name`, named in `synchronous_standby_names`. */
  readonly name: string;
  /** The TCP port on 127.0.0.1, kept across its restarts and rebuilds. */
  readonly port: number;
  /** Its folder (`data/`, credentials, `postgres.log`). */
  readonly rootDir: string;
}

/** A row of `pg_stat_replication` on the primary. */
export interface ReplicationRow {
  readonly application_name: string;
  readonly state: string;
  readonly sync_state: string;
}

/** A primary and (unless it is being rebuilt) its synchronous standby. */
export interface ReplicatedPair {
  /** Both nodes, in the order they were made; the first starts as the primary. */
  readonly nodes: readonly [PgNode, PgNode];
  /** The node that is, or last was, the primary. */
  primary(): PgNode;
  /** The running standby, or undefined between a promotion and a rebuild. */
  standby(): PgNode | undefined;
  /**
   * A superuser URL of a node.
   *
   * @param node the node.
   * @param database the database (default `postgres`).
   * @returns a postgres:// URL on 127.0.0.1.
   */
  adminUrl(node: PgNode, database?: string): string;
  /**
   * A URL for another role of a node (roles are replicated).
   *
   * @param node the node.
   * @param user the role.
   * @param password its password.
   * @param database the database.
   * @returns a postgres:// URL on 127.0.0.1.
   */
  urlFor(node: PgNode, user: string, password: string, database: string): string;
  /**
   * Reads `pg_stat_replication` on the running primary.
   *
   * @returns its rows, by application name.
   * @throws Error when no primary runs.
   */
  replication(): Promise<ReplicationRow[]>;
  /**
   * Stops the primary with `pg_ctl stop -m immediate` (no shutdown
   * checkpoint, backends killed: a crash, as far as clients can tell).
   *
   * @throws Error when no primary runs.
   */
  stopPrimary(): Promise<void>;
  /**
   * Promotes the standby (`pg_promote()`, waiting until it accepts writes).
   *
   * @throws Error when the primary still runs (two primaries must never
   *   take writes) or no standby runs.
   */
  promoteStandby(): Promise<void>;
  /**
   * Makes the stopped node a standby of the running primary by a fresh file
   * copy, starts it, and waits until it streams and is synchronous.
   *
   * @throws Error when no primary runs or the primary already has a standby.
   */
  rebuildStandby(): Promise<void>;
  /**
   * Stops the standby (`pg_ctl stop -m fast`); the primary's commits then
   * wait for it.
   *
   * @throws Error when no standby runs.
   */
  stopStandby(): Promise<void>;
  /**
   * Starts the stopped standby again from its own folder and waits until it
   * is synchronous again.
   *
   * @throws Error when there is no stopped standby.
   */
  startStandby(): Promise<void>;
  /** Stops both servers and removes their folders. Safe to call twice. */
  close(): Promise<void>;
}

/** Options of {@link startReplicatedPair}. */
export interface PairOptions {
  /** Names of the two nodes (default `node_a`, `node_b`): lower-case letters, digits, `_`. */
  readonly names?: readonly [string, string];
}

type Role = 'primary' | 'standby' | 'stopped-primary' | 'stopped-standby' | 'empty';

interface NodeState extends PgNode {
  /** Mutable here: the second node's port is picked by its first start. */
  port: number;
  role: Role;
  server: EmbeddedPostgres | undefined;
}

/**
 * Creates a primary (initdb through the embedded server), a replication
 * role, and a synchronous standby made by a file copy, in a new folder under
 * the OS temp folder. As root, the folders are reachable by the `postgres`
 * OS user, which runs the servers.
 *
 * @param options the nodes' names.
 * @returns the pair, with the standby streaming and synchronous.
 * @throws Error with the server's log tail when a server does not start or
 *   the standby does not become synchronous within a minute.
 */
export async function startReplicatedPair(options: PairOptions = {}): Promise<ReplicatedPair> {
  const names = options.names ?? ['node_a', 'node_b'];
  for (const name of names) {
    if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`invalid node name: ${name}`);
  }
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'app-test-failover-'));
  // The postgres OS user must pass through to the nodes' folders.
  await fs.chmod(root, 0o711);
  const replicationPassword = randomBytes(18).toString('base64url');
  const nodes: NodeState[] = [];
  // Both nodes are one cluster: one superuser, read from the first start.
  const superuser = { name: '', password: '' };
  let closed: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closed ??= (async () => {
      for (const node of nodes) {
        await node.server?.stop('immediate').catch(() => undefined);
        node.server = undefined;
      }
      await fs.rm(root, { recursive: true, force: true });
    })());
  try {
    const firstDir = path.join(root, names[0]);
    const first = await EmbeddedPostgres.start({
      rootDir: firstDir,
      port: 0,
      settings: NODE_SETTINGS,
    });
    nodes.push({
      name: names[0],
      port: first.port,
      rootDir: firstDir,
      role: 'primary',
      server: first,
    });
    const adminUrl = new URL(first.adminUrl());
    superuser.name = decodeURIComponent(adminUrl.username);
    superuser.password = decodeURIComponent(adminUrl.password);
    const secondDir = path.join(root, names[1]);
    // A port for the second node, found by starting nothing: the first
    // start of the standby picks it, and its rebuilds keep it.
    nodes.push({ name: names[1], port: 0, rootDir: secondDir, role: 'empty', server: undefined });
    const admin = createSql(first.adminUrl(), { max: 1, applicationName: 'test-replication' });
    try {
      await admin.unsafe(
        `create role ${REPLICATION_ROLE} with login replication password '${replicationPassword}'`,
      );
    } finally {
      await admin.end();
    }
    // initdb's pg_hba.conf already lets any role replicate over 127.0.0.1
    // with a password; the line states what this setup relies on.
    await fs.appendFile(
      path.join(firstDir, 'data', 'pg_hba.conf'),
      `\nhost replication ${REPLICATION_ROLE} 127.0.0.1/32 scram-sha-256\n`,
    );
    await withAdmin(first.adminUrl(), (sql) => sql`select pg_reload_conf()`);
  } catch (err) {
    await close();
    throw err;
  }

  const primaryNode = (): NodeState | undefined => nodes.find((n) => n.role === 'primary');
  const standbyNode = (): NodeState | undefined => nodes.find((n) => n.role === 'standby');
  const requirePrimary = (): NodeState => {
    const p = primaryNode();
    if (p?.server === undefined) throw new Error('the pair has no running primary');
    return p;
  };

  const rebuild = async (): Promise<void> => {
    const primary = requirePrimary();
    if (standbyNode() !== undefined) throw new Error('the primary already has a standby');
    const target = nodes.find((n) => n !== primary);
    if (target === undefined || target.server !== undefined) {
      throw new Error('the other node still runs');
    }
    await copyAsStandby(primary, target, replicationPassword);
    const server = await EmbeddedPostgres.start({
      rootDir: target.rootDir,
      port: target.port,
      settings: NODE_SETTINGS,
    }).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}\n${await logTail(target)}`);
    });
    target.port = server.port;
    target.server = server;
    target.role = 'standby';
    await makeSynchronous(primary, target);
  };

  try {
    await rebuild();
  } catch (err) {
    await close();
    throw err;
  }

  const urlOf = (node: PgNode, user: string, password: string, database: string): string =>
    `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${String(node.port)}/${encodeURIComponent(database)}`;

  return {
    nodes: [nodes[0] as PgNode, nodes[1] as PgNode],
    primary: () => {
      const p = nodes.find((n) => n.role === 'primary' || n.role === 'stopped-primary');
      if (p === undefined) throw new Error('the pair has no primary');
      return p;
    },
    standby: standbyNode,
    adminUrl: (node, database = 'postgres') =>
      urlOf(node, superuser.name, superuser.password, database),
    urlFor: urlOf,
    replication: async () => {
      const primary = requirePrimary();
      return withAdmin(
        primary.server?.adminUrl() ?? '',
        (sql) => sql<ReplicationRow[]>`
          select application_name, state, sync_state
            from pg_stat_replication order by application_name`,
      ).then((rows) => rows.map((r) => ({ ...r })));
    },
    stopPrimary: async () => {
      const primary = requirePrimary();
      await primary.server?.stop('immediate');
      primary.server = undefined;
      primary.role = 'stopped-primary';
    },
    promoteStandby: async () => {
      if (primaryNode() !== undefined) {
        throw new Error('the primary is still running: stop it before promoting its standby');
      }
      const standby = standbyNode();
      if (standby?.server === undefined) throw new Error('the pair has no running standby');
      const [row] = await withAdmin(
        standby.server.adminUrl(),
        (sql) => sql<{ promoted: boolean }[]>`select pg_promote(true, 60) as promoted`,
      );
      if (row?.promoted !== true) throw new Error(`${standby.name} was not promoted within 60 s`);
      for (const n of nodes) if (n.role === 'stopped-primary') n.role = 'empty';
      standby.role = 'primary';
    },
    rebuildStandby: rebuild,
    stopStandby: async () => {
      const standby = standbyNode();
      if (standby?.server === undefined) throw new Error('the pair has no running standby');
      await standby.server.stop('fast');
      standby.server = undefined;
      standby.role = 'stopped-standby';
    },
    startStandby: async () => {
      const standby = nodes.find((n) => n.role === 'stopped-standby');
      if (standby === undefined) throw new Error('the pair has no stopped standby');
      standby.server = await EmbeddedPostgres.start({
        rootDir: standby.rootDir,
        port: standby.port,
        settings: NODE_SETTINGS,
      });
      standby.role = 'standby';
      await makeSynchronous(requirePrimary(), standby);
    },
    close,
  };
}

async function withAdmin<T>(url: string, use: (sql: Sql) => Promise<T>): Promise<T> {
  const sql = createSql(url, { max: 1, applicationName: 'test-replication' });
  try {
    return await use(sql);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

async function logTail(node: PgNode): Promise<string> {
  const log = await fs.readFile(path.join(node.rootDir, 'postgres.log'), 'utf8').catch(() => '');
  return log.split('\n').slice(-30).join('\n');
}

/**
 * The low-level base backup: copies the primary's data folder into the
 * target's between `pg_backup_start()` and `pg_backup_stop()` (one session),
 * then makes the copy a standby of the primary.
 */
async function copyAsStandby(
  primary: NodeState,
  target: NodeState,
  replicationPassword: string,
): Promise<void> {
  const server = primary.server;
  if (server === undefined) throw new Error('the pair has no running primary');
  const sourceData = path.join(primary.rootDir, 'data');
  const targetData = path.join(target.rootDir, 'data');
  await fs.rm(targetData, { recursive: true, force: true });
  await fs.mkdir(target.rootDir, { recursive: true });
  // Both nodes are one cluster: the same superuser and password.
  await fs.copyFile(
    path.join(primary.rootDir, 'credentials.json'),
    path.join(target.rootDir, 'credentials.json'),
  );
  const sql = createSql(server.adminUrl(), { max: 1, applicationName: 'test-base-backup' });
  try {
    const session = await sql.reserve();
    try {
      await session`select pg_backup_start(${`standby ${target.name}`}, true)`;
      await copyTree(sourceData, targetData, true);
      const [stop] = await session<{ labelfile: string; spcmapfile: string }[]>`
        select labelfile, spcmapfile from pg_backup_stop(false)`;
      if (stop === undefined) throw new Error('pg_backup_stop returned nothing');
      await fs.writeFile(path.join(targetData, 'backup_label'), stop.labelfile);
      if (stop.spcmapfile !== '') {
        await fs.writeFile(path.join(targetData, 'tablespace_map'), stop.spcmapfile);
      }
    } finally {
      session.release();
    }
  } finally {
    await sql.end({ timeout: 1 });
  }
  await fs.writeFile(path.join(targetData, 'standby.signal'), '');
  const autoConf = path.join(targetData, 'postgresql.auto.conf');
  const kept = (await fs.readFile(autoConf, 'utf8').catch(() => ''))
    .split('\n')
    .filter((line) => !/^\s*(synchronous_standby_names|primary_conninfo)\s*=/.test(line));
  const conninfo =
    `host=127.0.0.1 port=${String(primary.port)} user=${REPLICATION_ROLE} ` +
    `password=${replicationPassword} application_name=${target.name}`;
  kept.push(`primary_conninfo = '${conninfo}'`, '');
  await fs.writeFile(autoConf, kept.join('\n'));
  const binaries = await resolveBinaries();
  if (binaries.runAs) {
    const { uid, gid } = binaries.runAs;
    await execFileAsync('chown', ['-R', `${String(uid)}:${String(gid)}`, targetData]);
  }
  await fs.chmod(targetData, 0o700);
}

/**
 * Copies a folder of a running server, file by file. A file that vanishes
 * while it is copied (a dropped relation, a temporary file) is skipped: the
 * WAL replayed from the backup's start recreates what matters, as it does
 * for pg_basebackup.
 */
async function copyTree(from: string, to: string, top: boolean): Promise<void> {
  await fs.mkdir(to, { recursive: true, mode: 0o700 });
  const entries = await fs.readdir(from, { withFileTypes: true }).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  });
  for (const entry of entries) {
    const source = path.join(from, entry.name);
    const target = path.join(to, entry.name);
    if (EXCLUDED_FILES.has(entry.name) || entry.name.startsWith('pgsql_tmp')) continue;
    if (entry.isDirectory()) {
      if (top && EMPTIED_FOLDERS.has(entry.name)) {
        await fs.mkdir(target, { recursive: true, mode: 0o700 });
        if (entry.name === 'pg_wal') await fs.mkdir(path.join(target, 'archive_status'));
        continue;
      }
      await copyTree(source, target, false);
    } else if (entry.isFile()) {
      try {
        await fs.copyFile(source, target);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
  }
}

/**
 * Waits until the standby streams from the primary, names it in the
 * primary's `synchronous_standby_names` (reloaded, no restart) and waits
 * until it is the synchronous standby and the primary's commits wait for it.
 */
async function makeSynchronous(primary: NodeState, standby: NodeState): Promise<void> {
  const url = primary.server?.adminUrl();
  if (url === undefined) throw new Error('the pair has no running primary');
  await withAdmin(url, async (sql) => {
    const waitFor = async (what: string, sync: boolean): Promise<void> => {
      const until = Date.now() + 60_000;
      for (;;) {
        const rows = await sql<{ sync_state: string }[]>`
          select sync_state from pg_stat_replication
           where application_name = ${standby.name} and state = 'streaming'`;
        if (rows.length > 0 && (!sync || rows[0]?.sync_state === 'sync')) return;
        if (Date.now() > until) {
          throw new Error(`gave up waiting: ${what}\n${await logTail(standby)}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await waitFor(`${standby.name} streams from ${primary.name}`, false);
    // Names are checked at creation: lower-case letters, digits and `_`.
    await sql.unsafe(`alter system set synchronous_standby_names = 'FIRST 1 (${standby.name})'`);
    await sql`select pg_reload_conf()`;
    await waitFor(`${standby.name} is the synchronous standby of ${primary.name}`, true);
    // pg_stat_replication says sync once the walsender has read the setting,
    // but commits wait for the standby only once the checkpointer has read
    // it too (it publishes it in shared memory), and a checkpointer busy
    // with a checkpoint reads it late: until then the primary acknowledges
    // commits the standby may not have. A checkpoint request is served after
    // the checkpointer has read its pending reload, so once it returns,
    // commits wait.
    await sql`checkpoint`;
  });
}
