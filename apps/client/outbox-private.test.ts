/**
 * Whether an outbox is its owner's alone: the directories on its path
 * on a real file system, and, with the file-system calls of one that
 * keeps no modes (a Windows drive under WSL, vfat, which no test machine
 * mounts) wrapped around real files, that such a file is opened with a
 * warning instead of refused.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import * as nodeFs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { Outbox } from './outbox.js';
import { groupIsPrivate } from './outbox-groups.js';
import {
  privateDirectory,
  privateFile,
  systemFs,
  type ModeFileSystem,
  type ModeStat,
} from './outbox-private.js';

async function tempDir(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-private-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

const NO_MODES_DEV = 424242;

/**
 * node:fs as it looks on a file system keeping no modes mounted at
 * `mount`: every file and directory under it shows `shown` and one device
 * number, and chmod is ignored (`drvfs`) or refused with EPERM (`vfat`).
 * Files outside it are node:fs's own.
 */
function noModes(mount: string, shown: number, chmod: 'drvfs' | 'vfat'): ModeFileSystem {
  const inside = (file: string): boolean => file === mount || file.startsWith(`${mount}/`);
  const opened = new Map<number, string>();
  const shape = (file: string, st: nodeFs.Stats | undefined): ModeStat | undefined => {
    if (st === undefined || !inside(file)) return st;
    return {
      uid: st.uid,
      gid: st.gid,
      mode: (st.mode & ~0o7777) | shown,
      dev: NO_MODES_DEV,
      ino: st.ino,
      isFile: () => st.isFile(),
      isSymbolicLink: () => st.isSymbolicLink(),
    };
  };
  const change = (file: string, apply: () => void): void => {
    if (!inside(file)) {
      apply();
      return;
    }
    if (chmod === 'vfat') {
      throw Object.assign(new Error(`EPERM: operation not permitted, chmod '${file}'`), {
        code: 'EPERM',
      });
    }
  };
  return {
    lstatSync: (file, options) => shape(file, nodeFs.lstatSync(file, options)),
    statSync: (file, options) => shape(file, nodeFs.statSync(file, options)),
    realpathSync: (file) => nodeFs.realpathSync(file),
    chmodSync: (file, mode) => {
      change(file, () => {
        nodeFs.chmodSync(file, mode);
      });
    },
    openSync: (file, flags, mode) => {
      const fd = nodeFs.openSync(file, flags, mode);
      opened.set(fd, file);
      return fd;
    },
    fstatSync: (fd) => {
      const st = shape(opened.get(fd) ?? '', nodeFs.fstatSync(fd));
      if (st === undefined) throw new Error('no such descriptor');
      return st;
    },
    fchmodSync: (fd, mode) => {
      change(opened.get(fd) ?? '', () => {
        nodeFs.fchmodSync(fd, mode);
      });
    },
    closeSync: (fd) => {
      opened.delete(fd);
      nodeFs.closeSync(fd);
    },
    unlinkSync: (file) => {
      nodeFs.unlinkSync(file);
    },
  };
}

void t.test(
  'on a file system keeping no modes the owner is checked, the modes are not, and the caller is warned once',
  async (t) => {
    const mount = await tempDir(t);
    const file = path.join(mount, 'outbox.sqlite');
    Outbox.open(file).close();
    await fs.writeFile(`${file}-wal`, '');

    // A Windows drive under WSL: everything shows 0777 and chmod does nothing.
    const warnings: string[] = [];
    const opened = privateFile(file, (w) => warnings.push(w), noModes(mount, 0o777, 'drvfs'));
    t.equal(opened, nodeFs.realpathSync(file), 'opened by its real path');
    t.equal(warnings.length, 1, 'one warning');
    t.match(
      warnings[0],
      /^the file system of outbox .*outbox\.sqlite keeps no file modes \(it shows 0777\): whether other users may read or write it is not checked/,
    );

    // vfat: the mount's mode (0755 here) and chmod refused.
    const vfat: string[] = [];
    privateFile(file, (w) => vfat.push(w), noModes(mount, 0o755, 'vfat'));
    t.match(vfat, [/keeps no file modes \(it shows 0755\)/], 'warned, not refused');

    // A file system keeping no modes and a private mount (0700): nothing to change, no warning.
    const quiet: string[] = [];
    privateFile(file, (w) => quiet.push(w), noModes(mount, 0o700, 'vfat'));
    t.same(quiet, [], 'a mode that is already private needs no change');
  },
);

void t.test(
  'a directory above such a mount, on a file system that keeps modes, is still checked',
  async (t) => {
    const parent = await tempDir(t);
    const mount = path.join(parent, 'mnt');
    await fs.mkdir(mount);
    await fs.chmod(parent, 0o777);
    const file = path.join(mount, 'outbox.sqlite');
    await fs.writeFile(file, '');
    t.throws(() => privateFile(file, () => undefined, noModes(mount, 0o777, 'drvfs')), {
      name: 'OutboxOpenError',
      message: new RegExp(
        `^cannot open outbox .*outbox\\.sqlite: other users may write the directory ${nodeFs.realpathSync(parent)} \\(mode 0777\\)`,
      ),
    });
  },
);

void t.test(
  'an outbox in a directory others may write is refused, in its own directory even when sticky',
  async (t) => {
    const dir = await tempDir(t);
    const shared = path.join(dir, 'shared');
    await fs.mkdir(shared);
    const file = path.join(shared, 'outbox.sqlite');
    Outbox.open(file).close();
    await fs.chmod(shared, 0o777);
    t.throws(() => Outbox.open(file), {
      name: 'OutboxOpenError',
      message:
        /^cannot open outbox .*outbox\.sqlite: other users may write the directory .*shared \(mode 0777\), so they could swap the outbox for a file of theirs after this check: keep the outbox in a directory of your own/,
    });

    // In a sticky directory (as /tmp is) no one else may rename the
    // outbox, but anyone may create the -wal file SQLite reads beside it.
    await fs.chmod(shared, 0o1777);
    t.throws(() => Outbox.open(file), {
      name: 'OutboxOpenError',
      message:
        /other users may write the directory .*shared \(mode 01777\), so they could create the -wal file SQLite reads beside it/,
    });
    let advice = '';
    try {
      Outbox.open(file).close();
    } catch (err) {
      advice = String(err);
    }
    t.notMatch(advice, /chmod go-w/, 'no advice to open up /tmp');
    // Above the outbox's own directory a sticky one is safe: /tmp/mine/outbox.
    const mine = path.join(shared, 'mine');
    await fs.mkdir(mine, { mode: 0o700 });
    Outbox.open(path.join(mine, 'outbox.sqlite')).close();

    // A directory further up counts as much as the outbox's own.
    const nested = path.join(dir, 'a', 'b');
    await fs.mkdir(nested, { recursive: true });
    const deep = path.join(nested, 'outbox.sqlite');
    Outbox.open(deep).close();
    await fs.chmod(path.join(dir, 'a'), 0o757);
    t.throws(() => Outbox.open(deep), /may write the directory .*\/a \(mode 0757\)/);

    // A new outbox refused for its place leaves no empty file behind.
    const fresh = path.join(shared, 'new.sqlite');
    t.throws(() => Outbox.open(fresh), /may write the directory/);
    t.equal(nodeFs.existsSync(fresh), false, 'no file is made in a refused place');

    if (process.getuid?.() === 0) {
      // A directory another user owns: they may rename its entries.
      const theirs = path.join(dir, 'theirs');
      await fs.mkdir(theirs, { mode: 0o755 });
      const inTheirs = path.join(theirs, 'outbox.sqlite');
      Outbox.open(inTheirs).close();
      await fs.chown(theirs, 65534, 65534);
      t.throws(() => Outbox.open(inTheirs), {
        name: 'OutboxOpenError',
        message:
          /^cannot open outbox .*outbox\.sqlite: the directory .*theirs belongs to user 65534/,
      });
    } else {
      t.comment(
        'not root: a directory of another user cannot be made here, its refusal is not run',
      );
    }
  },
);

void t.test(
  "a group-writable directory or file is another user's way in unless the group is private",
  async (t) => {
    const dir = await tempDir(t);
    const group = path.join(dir, 'group');
    await fs.mkdir(group);
    const file = path.join(group, 'outbox.sqlite');
    Outbox.open(file).close();
    await fs.chmod(group, 0o775);
    const real = nodeFs.realpathSync(file);
    t.throws(
      () =>
        privateFile(
          file,
          () => undefined,
          undefined,
          () => false,
        ),
      /may write the directory .*group \(mode 0775\)/,
      'a shared group',
    );
    t.equal(
      privateFile(
        file,
        () => undefined,
        undefined,
        () => true,
      ),
      real,
      "the user's private group (umask 002 under user private groups)",
    );
    await fs.chmod(group, 0o700);
    await fs.chmod(file, 0o660);
    t.throws(
      () =>
        privateFile(
          file,
          () => undefined,
          undefined,
          () => false,
        ),
      /may write it \(mode 0660\)/,
    );
    privateFile(
      file,
      () => undefined,
      undefined,
      () => true,
    );
    t.equal(nodeFs.statSync(file).mode & 0o777, 0o600, 'made 0600 in a private group');

    const user = { name: 'ann', gid: 1000 };
    const passwd = 'root:x:0:0::/root:/bin/sh\nann:x:1000:1000::/home/ann:/bin/sh\n';
    t.ok(groupIsPrivate(1000, user, 'root:x:0:\nann:x:1000:\n', passwd), 'no member listed');
    t.ok(groupIsPrivate(1000, user, 'ann:x:1000:ann\n', passwd), 'the user listed');
    t.notOk(groupIsPrivate(1000, user, 'ann:x:1000:ann,bob\n', passwd), 'another member');
    t.notOk(
      groupIsPrivate(1000, user, 'ann:x:1000:\n', `${passwd}bob:x:1001:1000::/home/bob:/bin/sh\n`),
      'another user with it as primary group',
    );
    t.notOk(groupIsPrivate(1000, user, 'staff:x:50:\n', passwd), 'not in the group file');
    t.notOk(
      groupIsPrivate(100, { name: 'ann', gid: 100 }, 'users:x:100:\n', passwd),
      'a shared primary group with no member listed (a directory service holds them)',
    );
    t.notOk(groupIsPrivate(50, user, 'staff:x:50:\n', passwd), 'not the primary group');
    t.notOk(
      groupIsPrivate(1000, user, 'ann:x:1000:\nann2:x:1000:bob\n', passwd),
      'a second line of the same gid with a member',
    );
  },
);

void t.test(
  'a file renamed over the outbox while it is checked is not the one accepted',
  async (t) => {
    const dir = await tempDir(t);
    const file = path.join(dir, 'outbox.sqlite');
    Outbox.open(file).close();
    await fs.chmod(file, 0o644);
    const planted = path.join(dir, 'planted.sqlite');
    Outbox.open(planted).close();
    // Private, as a user's own older outbox is: only its identity tells it apart.
    await fs.chmod(planted, 0o600);
    // Between the check by path and the open, as a racing user would.
    const racing: ModeFileSystem = {
      ...nodeFs,
      lstatSync: (f, o) => nodeFs.lstatSync(f, o),
      statSync: (f, o) => nodeFs.statSync(f, o),
      chmodSync: (f, mode) => {
        nodeFs.chmodSync(f, mode);
        nodeFs.renameSync(planted, file);
      },
    };
    t.throws(
      () =>
        privateFile(
          file,
          () => undefined,
          racing,
          () => false,
        ),
      {
        name: 'OutboxOpenError',
        message: /outbox\.sqlite: it was removed or replaced while it was checked/,
      },
    );
  },
);

void t.test(
  'the files beside the outbox: a readable one is made 0600, a link is refused',
  async (t) => {
    const dir = await tempDir(t);
    const file = path.join(dir, 'outbox.sqlite');
    Outbox.open(file).close();
    await fs.writeFile(`${file}-wal`, '');
    await fs.chmod(`${file}-wal`, 0o644);
    privateFile(file, () => undefined);
    t.equal(nodeFs.statSync(`${file}-wal`).mode & 0o777, 0o600, 'an older -wal made 0600');
    await fs.rm(`${file}-wal`);
    await fs.symlink(path.join(dir, 'elsewhere'), `${file}-journal`);
    t.throws(() => privateFile(file, () => undefined), /its -journal file .* is not a file/);
  },
);

void t.test(
  'an outbox removed while it is checked, or that is no regular file, is refused',
  async (t) => {
    const dir = await tempDir(t);
    // The open made or found it a moment before: another user removed it
    // to rename a file of theirs in.
    t.throws(() => privateFile(path.join(dir, 'gone.sqlite'), () => undefined), {
      name: 'OutboxOpenError',
      message: /gone\.sqlite: it was removed or replaced while it was checked/,
    });
    const folder = path.join(dir, 'folder.sqlite');
    await fs.mkdir(folder);
    t.throws(() => Outbox.open(folder), {
      name: 'OutboxOpenError',
      message: /folder\.sqlite: it is not a regular file/,
    });
    const fifo = path.join(dir, 'fifo.sqlite');
    const made = spawnSync('mkfifo', [fifo]);
    if (made.status === 0) {
      t.throws(() => Outbox.open(fifo), /fifo\.sqlite: it is not a regular file/, 'a pipe');
    } else {
      t.comment('no mkfifo here: the pipe is not tried');
    }
  },
);

void t.test(
  "a new outbox's folder is the kernel's: link/.. is the link target's parent",
  async (t) => {
    const dir = await tempDir(t);
    const shared = path.join(dir, 'shared');
    await fs.mkdir(path.join(shared, 'sub'), { recursive: true });
    await fs.chmod(shared, 0o777);
    const home = path.join(dir, 'home');
    await fs.mkdir(home, { mode: 0o700 });
    await fs.symlink(path.join(shared, 'sub'), path.join(home, 'link'));
    // As text, home/link/.. is home; the kernel opens shared.
    const file = `${path.join(home, 'link')}/../outbox.sqlite`;
    t.throws(() => Outbox.open(file), {
      name: 'OutboxOpenError',
      message: /may write the directory .*shared \(mode 0777\)/,
    });
    t.same(
      (await fs.readdir(shared)).filter((f) => f !== 'sub'),
      [],
      'no file made in the open directory',
    );
    t.same(await fs.readdir(home), ['link'], 'nor beside the link');
  },
);

void t.test(
  'a probe file another user removed first ends in the refusal, not a crash',
  async (t) => {
    const dir = await tempDir(t);
    const open = path.join(dir, 'open');
    await fs.mkdir(open, { mode: 0o777 });
    await fs.chmod(open, 0o777);
    const probeGone: ModeFileSystem = {
      ...systemFs,
      // As if another user who may write the directory removed it first.
      unlinkSync: (f) => {
        nodeFs.unlinkSync(f);
        throw Object.assign(new Error(`ENOENT: no such file, unlink '${f}'`), { code: 'ENOENT' });
      },
    };
    t.throws(() => privateDirectory(path.join(open, 'outbox.sqlite'), probeGone), {
      name: 'OutboxOpenError',
      message: /may write the directory .*open \(mode 0777\)/,
    });
  },
);
