/**
 * The lock of an embedded cluster's folder (`server.lock`): which live
 * process runs its server (pid and, on Linux, when that process started),
 * and once it shares the server, where it listens. A second process, or a
 * second start in this one, must not stop a server another one is using.
 */
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

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
 * What `server.lock` holds: who runs the server (its pid and, on Linux, when
 * that process started, so a pid reused after a restart is not taken for
 * the holder), and once it shares the server, where it listens.
 */
export interface LockContent {
  readonly pid: number;
  readonly started: string | undefined;
  readonly port: number | undefined;
}

export const LOCK_FILE = 'server.lock';

let bootId: string | undefined | null = null;

/**
 * When a process started, as `<boot id>:<start time in clock ticks>` from
 * /proc: the same pid after a reboot, or in a restarted container, is
 * another process. Undefined where /proc does not tell (not Linux).
 *
 * @param pid the process.
 * @returns its start identity, or undefined.
 */
export function processStart(pid: number): string | undefined {
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
export async function readLock(rootDir: string): Promise<LockContent | undefined> {
  return parseLock(await fs.readFile(path.join(rootDir, LOCK_FILE), 'utf8').catch(() => ''));
}

/** Whether the process a lock names is alive and is the one that wrote it. */
export function holderAlive(holder: LockContent): boolean {
  if (!alive(holder.pid)) return false;
  return holder.started === undefined || holder.started === processStart(holder.pid);
}

export async function holdsLock(rootDir: string): Promise<boolean> {
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
export async function takeLock(rootDir: string): Promise<void> {
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

export async function releaseLock(rootDir: string): Promise<void> {
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

/**
 * Records in the lock this process holds where its server listens, so
 * other processes may use it. Written beside and renamed over: a reader sees
 * the old content or the new, never half.
 *
 * @param rootDir the cluster's folder.
 * @param port the server's port.
 * @throws Error when this process no longer holds the lock.
 */
export async function shareLock(rootDir: string, port: number): Promise<void> {
  const holder = await readLock(rootDir);
  if (holder?.pid !== process.pid || holder.started !== processStart(process.pid)) {
    throw new Error(`lost the lock ${path.join(rootDir, LOCK_FILE)}`);
  }
  const temporary = path.join(rootDir, `${LOCK_FILE}.${String(process.pid)}.tmp`);
  await fs.writeFile(
    temporary,
    JSON.stringify({ pid: process.pid, started: holder.started, port }),
    {
      mode: 0o600,
    },
  );
  await fs.rename(temporary, path.join(rootDir, LOCK_FILE));
}
