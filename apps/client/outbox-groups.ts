/**
 * Whether a group is this user's private group, so that its write bit lets
 * no other user in: read from /etc/group and /etc/passwd (outbox-private.ts
 * asks it of a group-writable outbox or directory). See docs/DECISIONS.md,
 * "The outbox is its owner's alone".
 */

/** Whether a group is this user's alone, so its write bit lets no one else in. */
export type GroupCheck = (gid: number) => boolean;

// A built-in through process.getBuiltinModule, not an ES import: the import
// reads every export of the module, lazy ones included, which costs the
// command line's start-up (docs/DECISIONS.md, "The client sends with
// node:http").
const nodeFs = process.getBuiltinModule('node:fs');

/**
 * Whether group `gid` is the user's private group (Debian and Ubuntu give
 * each user one, with umask 002, so new directories are group-writable):
 * the user's primary group, named after the user, no other member listed
 * in the group file, and no other user with it as their primary group in
 * the passwd file. A group the files do not list (one from a directory
 * service) is not private, and neither is a shared primary group such as
 * `users`, whose other members a directory service may hold unseen.
 *
 * @param gid the group of a file or directory.
 * @param user this user's name and primary group.
 * @param groupFile the text of /etc/group.
 * @param passwdFile the text of /etc/passwd.
 * @returns true when only this user is in the group.
 */
export function groupIsPrivate(
  gid: number,
  user: { readonly name: string; readonly gid: number },
  groupFile: string,
  passwdFile: string,
): boolean {
  if (gid !== user.gid) return false;
  const fields = (text: string): string[][] =>
    text
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('#'))
      .map((l) => l.split(':'));
  const groups = fields(groupFile).filter((f) => f[2] !== '' && Number(f[2]) === gid);
  // Named after the user, as a private group is: a shared primary group
  // (`users`, whose members a directory service may hold unseen here) is not.
  if (groups.length === 0 || groups.some((g) => g[0] !== user.name)) return false;
  for (const group of groups) {
    const members = (group[3] ?? '')
      .split(',')
      .map((m) => m.trim())
      .filter((m) => m !== '');
    if (members.some((m) => m !== user.name)) return false;
  }
  return !fields(passwdFile).some((f) => f[0] !== user.name && f[3] !== '' && Number(f[3]) === gid);
}

/** The check of this machine's group and passwd files, read once, when first needed. */
function systemGroupCheck(): GroupCheck {
  let verdicts: Map<number, boolean> | undefined;
  return (gid) => {
    verdicts ??= new Map();
    const known = verdicts.get(gid);
    if (known !== undefined) return known;
    const read = (file: string): string => {
      try {
        return nodeFs.readFileSync(file, 'utf8');
      } catch {
        return '';
      }
    };
    let name = '';
    try {
      name = process.getBuiltinModule('node:os').userInfo().username;
    } catch {
      name = '';
    }
    const verdict =
      name !== '' &&
      groupIsPrivate(
        gid,
        { name, gid: process.getgid?.() ?? -1 },
        read('/etc/group'),
        read('/etc/passwd'),
      );
    verdicts.set(gid, verdict);
    return verdict;
  };
}

/** The group check of this process: the files are read once. */
export const systemGroups = systemGroupCheck();
