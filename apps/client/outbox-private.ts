/**
 * Whether an outbox file is this user's alone, checked before SQLite opens
 * it: the file, every directory on its real path, and the files SQLite
 * keeps beside it. Its intents are sent with this user's token, so a file
 * another user wrote, or could swap for one of theirs, could hold a
 * request this user never stated. See docs/DECISIONS.md, "The outbox is
 * its owner's alone".
 */
import path from 'node:path';
import { OutboxOpenError } from './outbox-errors.js';
import { systemGroups, type GroupCheck } from './outbox-groups.js';

/** What the check reads of a file or directory. */
export interface ModeStat {
  readonly uid: number;
  readonly gid: number;
  readonly mode: number;
  readonly dev: number;
  readonly ino: number;
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
  openSync(file: string, flags: string, mode: number): number;
  fstatSync(fd: number): ModeStat;
  fchmodSync(fd: number, mode: number): void;
  closeSync(fd: number): void;
  unlinkSync(file: string): void;
}

// A built-in through process.getBuiltinModule, not an ES import: the import
// reads every export of the module, lazy ones included, which costs the
// command line's start-up (docs/DECISIONS.md, "The client sends with
// node:http").
const nodeFs = process.getBuiltinModule('node:fs');

/**
 * node:fs's calls, with the kernel's own real path (`realpathSync.native`):
 * the JavaScript one collapses `..` as text before it follows a link, so
 * `link/../outbox` would name another directory than the one the kernel
 * opens in.
 */
export const systemFs: ModeFileSystem = {
  lstatSync: (file, options) => nodeFs.lstatSync(file, options),
  statSync: (file, options) => nodeFs.statSync(file, options),
  realpathSync: (file) => nodeFs.realpathSync.native(file),
  chmodSync: (file, mode) => {
    nodeFs.chmodSync(file, mode);
  },
  openSync: (file, flags, mode) => nodeFs.openSync(file, flags, mode),
  fstatSync: (fd) => nodeFs.fstatSync(fd),
  fchmodSync: (fd, mode) => {
    nodeFs.fchmodSync(fd, mode);
  },
  closeSync: (fd) => {
    nodeFs.closeSync(fd);
  },
  unlinkSync: (file) => {
    nodeFs.unlinkSync(file);
  },
};

const STICKY = 0o1000;

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function octal(mode: number): string {
  return `0${(mode & 0o7777).toString(8)}`;
}

/** The mode bits through which another user may write: others', and the group's unless it is private. */
function othersWrite(st: { mode: number; gid: number }, privateGroup: GroupCheck): number {
  const bits = st.mode & 0o022;
  return (bits & 0o020) !== 0 && privateGroup(st.gid) ? bits & 0o002 : bits;
}

/**
 * Checks that the outbox file is this user's alone, before SQLite opens it.
 * A file of another owner, or one that another user may write, is
 * refused (as ssh refuses such a key file); one they may only read (an
 * older client made its files 0644) is made 0600, since it holds answers
 * and the principal's id. A symbolic link to a missing file is refused:
 * SQLite would make its target with its default mode. The link's owner,
 * every directory on the real path (one another user owns or may write
 * lets them swap the file, or a directory above it, after this check; a
 * sticky one such as /tmp counts as safe above the outbox's own directory,
 * never as that directory, where another user could still create the
 * `-wal` file SQLite reads) and the files SQLite keeps beside the outbox
 * (`-wal`, `-journal`, `-shm`: it reads their pages into the database as
 * it opens it) are checked too. A group-writable file or directory is
 * writable by others unless the group is this user's private group.
 *
 * The file is the same one (device and inode) after the check as before
 * it, or it is refused. On a file system that keeps no modes (a Windows
 * drive under WSL shows 0777 and ignores chmod; vfat refuses it), which a
 * probe file of the check's own tells, the modes say nothing: the owners
 * are still checked, the modes are not, and `warn` is told once. Windows keeps no
 * such bits: nothing is checked there.
 *
 * @param file the outbox's path.
 * @param warn told when the modes could not be checked.
 * @param fsys the file-system calls; node:fs's unless a test gives its own.
 * @param privateGroup whether a group is this user's alone; this machine's
 *   group files unless a test gives its own.
 * @returns the path to open: the file's real path once checked, so a link
 *   changed after the check is not followed.
 * @throws OutboxOpenError naming the owner, the mode, the link or the
 *   directory.
 */
export function privateFile(
  file: string,
  warn: (detail: string) => void,
  fsys: ModeFileSystem = systemFs,
  privateGroup: GroupCheck = systemGroups,
): string {
  if (process.platform === 'win32') return file;
  const link = fsys.lstatSync(file, { throwIfNoEntry: false });
  // The open made or found it just before: gone now, someone removed it.
  if (link === undefined) throw replaced(file);
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
  if (!stat.isFile()) {
    throw new OutboxOpenError(
      `cannot open outbox ${file}: it is not a regular file (a directory, a device or a pipe); give the path of an outbox file`,
    );
  }
  const writable = (what: string, mode: number, at: string): OutboxOpenError =>
    new OutboxOpenError(
      `cannot open outbox ${file}: other users may write ${what} (mode ${octal(mode)}), so it may hold intents this user never stated: chmod 600 ${at}, then check its intents (outbox list) before sending from it`,
    );
  if (uid !== undefined && stat.uid !== uid) throw foreign('it', stat.uid);
  // Only a mode that lets others in needs the answer, and a file system
  // without modes shows every file so.
  const modesKept = (stat.mode & 0o077) === 0 || keepsModes(fsys, file, real);
  if (!modesKept) {
    warn(
      `the file system of outbox ${file} keeps no file modes (it shows ${octal(stat.mode & 0o777)}): whether other users may read or write it is not checked; keep the outbox on a local file system that keeps modes to have it checked`,
    );
  }
  checkDirectories(file, path.dirname(real), stat.dev, () => modesKept, uid, fsys, privateGroup);
  if (modesKept && othersWrite(stat, privateGroup) !== 0) throw writable('it', stat.mode, real);
  if (modesKept && (stat.mode & 0o077) !== 0) {
    try {
      fsys.chmodSync(real, stat.mode & 0o700);
    } catch (err) {
      throw new OutboxOpenError(
        `cannot open outbox ${file}: it is readable by other users (mode ${octal(stat.mode)}) and could not be made 0600: ${message(err)}`,
      );
    }
  }
  // The file checked is the file to open: one renamed over it meanwhile
  // (which the directories' check leaves no other user the right to do)
  // is not accepted in its place.
  const after = fsys.statSync(real, { throwIfNoEntry: false });
  if (
    after === undefined ||
    after.dev !== stat.dev ||
    after.ino !== stat.ino ||
    (modesKept && (after.mode & 0o077) !== 0)
  ) {
    throw replaced(file);
  }
  for (const suffix of ['-wal', '-journal', '-shm']) {
    const at = `${real}${suffix}`;
    const beside = fsys.lstatSync(at, { throwIfNoEntry: false });
    if (beside === undefined) continue;
    if (uid !== undefined && beside.uid !== uid) throw foreign(`its ${suffix} file`, beside.uid);
    if (!beside.isFile()) {
      throw new OutboxOpenError(
        `cannot open outbox ${file}: its ${suffix} file ${at} is not a file (SQLite would follow it): remove it`,
      );
    }
    if (!modesKept) continue;
    if (othersWrite(beside, privateGroup) !== 0)
      throw writable(`its ${suffix} file`, beside.mode, at);
    if ((beside.mode & 0o077) !== 0) {
      try {
        fsys.chmodSync(at, beside.mode & 0o700);
      } catch (err) {
        throw new OutboxOpenError(
          `cannot open outbox ${file}: its ${suffix} file is readable by other users (mode ${octal(beside.mode)}) and could not be made 0600: ${message(err)}`,
        );
      }
    }
  }
  return real;
}

/**
 * Whether the outbox's file system keeps file modes, learnt from a file
 * of the check's own beside it (the outbox's own descriptor is not
 * opened: closing one would drop the locks SQLite holds on it in this
 * process): made 0600, changed to 0640 through its descriptor, read back.
 * A file system that keeps no modes refuses the change (EPERM, ENOTSUP) or
 * shows another mode after it. What another user does to the outbox's
 * path cannot change the answer.
 *
 * @throws OutboxOpenError when the probe file cannot be made.
 */
function keepsModes(fsys: ModeFileSystem, file: string, real: string): boolean {
  const probe = `${real}.mode-probe-${String(process.pid)}-${String(Date.now())}`;
  let fd: number;
  try {
    fd = fsys.openSync(probe, 'wx', 0o600);
  } catch (err) {
    throw new OutboxOpenError(
      `cannot open outbox ${file}: cannot tell whether its file system keeps file modes (${message(err)})`,
    );
  }
  try {
    try {
      fsys.fchmodSync(fd, 0o640);
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code === 'EPERM' || code === 'ENOTSUP') return false;
      throw new OutboxOpenError(
        `cannot open outbox ${file}: cannot tell whether its file system keeps file modes (${message(err)})`,
      );
    }
    return (fsys.fstatSync(fd).mode & 0o777) === 0o640;
  } catch (err) {
    if (err instanceof OutboxOpenError) throw err;
    throw new OutboxOpenError(
      `cannot open outbox ${file}: cannot tell whether its file system keeps file modes (${message(err)})`,
    );
  } finally {
    fsys.closeSync(fd);
    try {
      fsys.unlinkSync(probe);
    } catch {
      // Gone already: only another user who may write the directory could
      // have removed it, and the check refuses such a directory.
    }
  }
}

/**
 * Checks every directory on the outbox's real path, as ssh checks the
 * path to a key file: each is this user's or the superuser's, and no
 * other user may write it; above the outbox's own directory, a sticky one
 * may be written by others (in a sticky directory such as /tmp, only an
 * entry's owner may rename or remove it).
 */
function checkDirectories(
  file: string,
  own: string,
  dev: number,
  modesKept: () => boolean,
  uid: number | undefined,
  fsys: ModeFileSystem,
  privateGroup: GroupCheck,
): void {
  for (let dir = own; ; dir = path.dirname(dir)) {
    const st = fsys.statSync(dir, { throwIfNoEntry: false });
    if (st !== undefined) {
      if (uid !== undefined && st.uid !== uid && st.uid !== 0) {
        throw new OutboxOpenError(
          `cannot open outbox ${file}: the directory ${dir} belongs to user ${String(st.uid)}, who could swap the outbox for a file of theirs after this check: keep the outbox in a directory of your own`,
        );
      }
      const sticky = (st.mode & STICKY) !== 0;
      // A directory on the file system that keeps no modes shows them all;
      // asked last, since it may need a probe file.
      if (
        !(sticky && dir !== own) &&
        othersWrite(st, privateGroup) !== 0 &&
        (st.dev !== dev || modesKept())
      ) {
        const why = sticky
          ? 'they could create the -wal file SQLite reads beside it: keep the outbox in a directory of your own (mkdir -m 700)'
          : `they could swap the outbox for a file of theirs after this check: keep the outbox in a directory of your own (mkdir -m 700), or chmod go-w ${dir}`;
        throw new OutboxOpenError(
          `cannot open outbox ${file}: other users may write the directory ${dir} (mode ${octal(st.mode)}), so ${why}`,
        );
      }
    }
    if (path.dirname(dir) === dir) return;
  }
}

function replaced(file: string): OutboxOpenError {
  return new OutboxOpenError(
    `cannot open outbox ${file}: it was removed or replaced while it was checked; if no one else uses its directory, open it again`,
  );
}

/**
 * Checks the directories of an outbox not made yet, before it is made,
 * as {@link privateFile} checks them for an existing one: a place another
 * user may write or owns gets no file at all (a file made and then
 * removed again could, by then, be another one under the same path).
 * Whether the file system keeps modes is asked only if a directory's mode
 * would refuse it.
 *
 * @param file the outbox's path; its directory must exist (the open names
 *   a missing one).
 * @param fsys the file-system calls; node:fs's unless a test gives its own.
 * @param privateGroup whether a group is this user's alone.
 * @returns the path to make the file at: in the directory checked, so a
 *   link on the way changed after the check does not move it.
 * @throws OutboxOpenError naming the directory.
 */
export function privateDirectory(
  file: string,
  fsys: ModeFileSystem = systemFs,
  privateGroup: GroupCheck = systemGroups,
): string {
  if (process.platform === 'win32') return file;
  let own: string;
  try {
    // The kernel's resolution of the folder (`link/..` after the link),
    // not a textual one.
    own = fsys.realpathSync(path.dirname(file));
  } catch {
    return file;
  }
  const st = fsys.statSync(own, { throwIfNoEntry: false });
  if (st === undefined) return file;
  let kept: boolean | undefined;
  const modesKept = (): boolean =>
    (kept ??= keepsModes(fsys, file, path.join(own, path.basename(file))));
  checkDirectories(file, own, st.dev, modesKept, process.getuid?.(), fsys, privateGroup);
  return path.join(own, path.basename(file));
}
