/**
 * Whether an outbox is its owner's alone: the directories on its path
 * on a real file system, and, with the file-system calls of one that
 * keeps no modes (a Windows drive under WSL, vfat, which no test machine
 * mounts) wrapped around real files, that such a file is opened with a
 * warning instead of refused.
 */
import fs from 'node:fs/promises';
import * as nodeFs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { Outbox } from './outbox.js';
import { privateFile, type ModeFileSystem, type ModeStat } from './outbox-private.js';

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
  const shape = (file: string, st: nodeFs.Stats | undefined): ModeStat | undefined => {
    if (st === undefined || !inside(file)) return st;
    return {
      uid: st.uid,
      mode: (st.mode & ~0o7777) | shown,
      dev: NO_MODES_DEV,
      isFile: () => st.isFile(),
      isSymbolicLink: () => st.isSymbolicLink(),
    };
  };
  return {
    lstatSync: (file, options) => shape(file, nodeFs.lstatSync(file, options)),
    statSync: (file, options) => shape(file, nodeFs.statSync(file, options)),
    realpathSync: (file) => nodeFs.realpathSync(file),
    chmodSync: (file, mode) => {
      if (!inside(file)) {
        nodeFs.chmodSync(file, mode);
        return;
      }
      if (chmod === 'vfat') {
        throw Object.assign(new Error(`EPERM: operation not permitted, chmod '${file}'`), {
          code: 'EPERM',
        });
      }
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
  'an outbox in a directory others may write, not sticky, is refused; in a sticky one it is opened',
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
        /^cannot open outbox .*outbox\.sqlite: other users may write the directory .*shared \(mode 0777\), so they could swap the outbox for a file of theirs after this check: chmod go-w /,
    });
    await fs.chmod(shared, 0o775);
    t.throws(
      () => Outbox.open(file),
      /may write the directory .*shared \(mode 0775\)/,
      'group too',
    );

    // In a sticky directory (as /tmp is) only an entry's owner may rename it.
    await fs.chmod(shared, 0o1777);
    Outbox.open(file).close();

    // A directory further up counts as much as the outbox's own.
    const nested = path.join(dir, 'a', 'b');
    await fs.mkdir(nested, { recursive: true });
    const deep = path.join(nested, 'outbox.sqlite');
    Outbox.open(deep).close();
    await fs.chmod(path.join(dir, 'a'), 0o757);
    t.throws(() => Outbox.open(deep), /may write the directory .*\/a \(mode 0757\)/);

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
