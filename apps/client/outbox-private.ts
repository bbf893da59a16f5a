/**
 * Whether an outbox file is this user's alone, checked before SQLite opens
 * it: the file, the files SQLite keeps beside it, and every directory on
 * its real path. Its intents are sent with this user's token, so a file
 * another user wrote, or could swap for one of theirs, could hold a
 * request this user never stated. See docs/DECISIONS.md, "The outbox is
 * its owner's alone".
 */
import path from 'node:path';
import { OutboxOpenError } from './outbox-errors.js';

/** What the check reads of a file or directory. */
export interface ModeStat {
  readonly uid: number;
  readonly mode: number;
  readonly dev: number;
  isFile(): boolean;
  isSymbolicLink(): boolean;
}

/**
 * The file-system calls the check makes: node:fs's by default. A test
 * gives one that behaves like a file system keeping no modes (a Windows
 * drive under WSL shows every file 0777 and ignores chmod; vfat refuses
 * chmod), which no test machine mounts.
 */
export interface ModeFileSystem {
  lstatSync(file: string, options: { throwIfNoEntry: false }): ModeStat | undefined;
  statSync(file: string, options: { throwIfNoEntry: false }): ModeStat | undefined;
  realpathSync(file: string): string;
  chmodSync(file: string, mode: number): void;
}

// A built-in through process.getBuiltinModule, not an ES import: the import
// reads every export of the module, lazy ones included, which costs the
// command line's start-up (docs/DECISIONS.md, "The client sends with
// node:http").
const nodeFs: ModeFileSystem = process.getBuiltinModule('node:fs');

const STICKY = 0o1000;

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function octal(mode: number): string {
  return `0${(mode & 0o7777).toString(8)}`;
}

/**
 * Whether the file system keeps the file's mode, learnt by making the
 * file its owner's alone (0600 kept of its bits): a file system that
 * keeps no modes ignores the change (it shows the same mode after it) or
 * refuses it (EPERM, ENOTSUP).
 *
 * @returns true when the change was kept (the file is now private).
 * @throws OutboxOpenError when the change failed for another reason.
 */
function tighten(fsys: ModeFileSystem, file: string, real: string, mode: number): boolean {
  try {
    fsys.chmodSync(real, mode & 0o700);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'EPERM' || code === 'ENOTSUP') return false;
    throw new OutboxOpenError(
      `cannot open outbox ${file}: it is readable by other users (mode ${octal(mode)}) and could not be made 0600: ${message(err)}`,
    );
  }
  const after = fsys.statSync(real, { throwIfNoEntry: false });
  return after !== undefined && (after.mode & 0o777) === (mode & 0o700);
}

/**
 * Checks that the outbox file is this user's alone, before SQLite opens it.
 * A file of another owner, or one that group or others may write, is
 * refused (as ssh refuses such a key file); one they may only read (an
 * older client made its files 0644) is made 0600, since it holds answers
 * and the principal's id. A symbolic link to a missing file is refused:
 * SQLite would make its target with its default mode. The link's owner,
 * the files SQLite keeps beside the outbox (`-wal`, `-journal`, `-shm`:
 * it reads their pages into the database as it opens it) and every
 * directory on the real path are checked too: a directory another user
 * owns or may write (and is not sticky, as /tmp is) lets them swap the
 * file, or a directory above it, for theirs after this check.
 *
 * On a file system that keeps no modes (a Windows drive under WSL shows
 * 0777 and ignores chmod; vfat refuses chmod) the modes say nothing: the
 * owners are still checked, the modes are not, and `warn` is told once.
 * Windows keeps no such bits: nothing is checked there.
 *
 * @param file the outbox's path.
 * @param warn told when the modes could not be checked.
 * @param fsys the file-system calls; node:fs's unless a test gives its own.
 * @returns the path to open: the file's real path once checked, so a link
 *   changed after the check is not followed.
 * @throws OutboxOpenError naming the owner, the mode, the link or the
 *   directory.
 */
export function privateFile(
  file: string,
  warn: (detail: string) => void,
  fsys: ModeFileSystem = nodeFs,
): string {
  if (process.platform === 'win32') return file;
  const link = fsys.lstatSync(file, { throwIfNoEntry: false });
  if (link === undefined) return file;
  const uid = process.getuid?.();
  const foreign = (what: string, owner: number): OutboxOpenError =>
    new OutboxOpenError(
      `cannot open outbox ${file}: ${what} belongs to user ${String(owner)}, not to this user (${String(uid)}): another user could have written intents into it; use a file of your own`,
    );
  // A link another user owns could be pointed elsewhere after this check.
  if (link.isSymbolicLink() && uid !== undefined && link.uid !== uid) {
    throw foreign('its symbolic link', link.uid);
  }
  let real: string | undefined;
  try {
    real = fsys.realpathSync(file);
  } catch {
    real = undefined;
  }
  const stat = real === undefined ? undefined : fsys.statSync(real, { throwIfNoEntry: false });
  if (real === undefined || stat === undefined) {
    throw new OutboxOpenError(
      `cannot open outbox ${file}: it is a symbolic link to a missing file; give the target's path, or remove the link`,
    );
  }
  if (!stat.isFile()) return real;
  if (uid !== undefined && stat.uid !== uid) throw foreign('it', stat.uid);
  const writable = (what: string, mode: number, cure: string): OutboxOpenError =>
    new OutboxOpenError(
      `cannot open outbox ${file}: other users may write ${what} (mode ${octal(mode)}), so it may hold intents this user never stated: ${cure}`,
    );
  const mode = stat.mode & 0o777;
  let modesKept = true;
  if ((mode & 0o077) !== 0) {
    modesKept = tighten(fsys, file, real, mode);
    if (modesKept && (mode & 0o022) !== 0) {
      // Left as it was found: the owner is to look at its intents first.
      fsys.chmodSync(real, mode);
      throw writable('it', mode, `check its intents (outbox list), then chmod 600 ${real}`);
    }
    if (!modesKept) {
      warn(
        `the file system of outbox ${file} keeps no file modes (it shows ${octal(mode)}): whether other users may read or write it is not checked; keep the outbox on a local file system that keeps modes to have it checked`,
      );
    }
  }
  for (const suffix of ['-wal', '-journal', '-shm']) {
    const beside = fsys.lstatSync(`${real}${suffix}`, { throwIfNoEntry: false });
    if (beside === undefined) continue;
    if (uid !== undefined && beside.uid !== uid) throw foreign(`its ${suffix} file`, beside.uid);
    if (modesKept && (beside.mode & 0o022) !== 0) {
      throw writable(
        `its ${suffix} file`,
        beside.mode,
        `check its intents (outbox list), then chmod 600 ${real}${suffix}`,
      );
    }
  }
  checkDirectories(file, real, stat.dev, modesKept, uid, fsys);
  return real;
}

/**
 * Checks every directory on the outbox's real path, as ssh checks the
 * path to a key file: each is this user's or the superuser's, and no
 * other user may write it unless it is sticky (in a sticky directory such
 * as /tmp, only an entry's owner may rename or remove it).
 */
function checkDirectories(
  file: string,
  real: string,
  dev: number,
  modesKept: boolean,
  uid: number | undefined,
  fsys: ModeFileSystem,
): void {
  for (let dir = path.dirname(real); ; dir = path.dirname(dir)) {
    const st = fsys.statSync(dir, { throwIfNoEntry: false });
    if (st !== undefined) {
      if (uid !== undefined && st.uid !== uid && st.uid !== 0) {
        throw new OutboxOpenError(
          `cannot open outbox ${file}: the directory ${dir} belongs to user ${String(st.uid)}, who could swap the outbox for a file of theirs after this check: keep the outbox in a directory of your own`,
        );
      }
      // A directory on the file system that keeps no modes shows them all.
      const checked = modesKept || st.dev !== dev;
      if (checked && (st.mode & 0o022) !== 0 && (st.mode & STICKY) === 0) {
        throw new OutboxOpenError(
          `cannot open outbox ${file}: other users may write the directory ${dir} (mode ${octal(st.mode)}), so they could swap the outbox for a file of theirs after this check: chmod go-w ${dir}, or keep the outbox in a directory of your own`,
        );
      }
    }
    if (path.dirname(dir) === dir) return;
  }
}
