/**
 * `make build` (which `make run`, `make principal` and `make migrate`
 * start with) compiles only when what it reads changed: the project's
 * Makefile and TypeScript settings, copied with their times into a
 * temporary tree with one small source file, and the real compiler (the
 * checkout's node_modules, linked). An unchanged tree does not compile; a
 * changed, added or removed source does. The client's entry point is
 * built as one file, its own imports inside it, and a build whose bundling
 * fails fails.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';

const root = path.resolve(import.meta.dirname, '..');

/**
 * A temporary tree with the project's Makefile and settings (with their
 * times), the node runtime script, the checkout's node_modules and runtime
 * linked, and the empty source folders; removed when the test ends.
 *
 * @returns its path.
 */
async function scratchTree(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'make-build-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  for (const f of [
    'Makefile',
    'tsconfig.json',
    'tsconfig.build.json',
    'package.json',
    'package-lock.json',
  ]) {
    await fs.cp(path.join(root, f), path.join(dir, f), { preserveTimestamps: true });
  }
  await fs.mkdir(path.join(dir, 'scripts'));
  await fs.cp(
    path.join(root, 'scripts/node-runtime.mjs'),
    path.join(dir, 'scripts/node-runtime.mjs'),
  );
  await fs.symlink(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
  if (await fs.stat(path.join(root, '.runtime')).catch(() => undefined)) {
    await fs.symlink(path.join(root, '.runtime'), path.join(dir, '.runtime'));
  }
  for (const d of ['apps/client', 'kernel', 'platform', 'modules']) {
    await fs.mkdir(path.join(dir, d), { recursive: true });
  }
  return dir;
}

void t.test('make build compiles only when an input changed', async (t) => {
  const dir = await scratchTree(t);
  await fs.writeFile(path.join(dir, 'apps/a.ts'), 'export const a: number = 1;\n');
  // The client's entry point and a module of its own.
  await fs.writeFile(
    path.join(dir, 'apps/client/main.ts'),
    "import { part } from './part.js';\nprocess.stdout.write(part);\n",
  );
  await fs.writeFile(
    path.join(dir, 'apps/client/part.ts'),
    "export const part: string = 'one file';\n",
  );
  // The install step's stamp, newer than package.json: nothing is installed.
  const stamp = path.join(dir, 'install-stamp');
  await fs.writeFile(stamp, '');
  const make = () => {
    const r = spawnSync('make', ['build', `STAMP=${stamp}`], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, MAKEFLAGS: '' },
    });
    t.equal(r.status, 0, r.stderr);
    return { compiled: /tsc /.test(r.stdout), out: r.stdout + r.stderr };
  };
  // A file changed now, after the last build started.
  const touch = async (file: string) => {
    const now = new Date();
    await fs.utimes(path.join(dir, file), now, now);
  };

  t.ok(make().compiled, 'the first build compiles');
  t.ok(await fs.stat(path.join(dir, 'dist/apps/a.js')), 'into dist/');
  // A command line loads one file, not one per module (docs/DECISIONS.md,
  // "The command line is one file").
  const main = await fs.readFile(path.join(dir, 'dist/apps/client/main.js'), 'utf8');
  t.notMatch(main, /from ['"]\.\/part\.js['"]/, 'the entry point imports no module of its own');
  t.match(main, /one file/, 'it holds them');
  const run = spawnSync(process.execPath, [path.join(dir, 'dist/apps/client/main.js')], {
    encoding: 'utf8',
  });
  t.equal(run.stdout, 'one file', 'and runs');
  const second = make();
  t.notOk(second.compiled, `an unchanged tree is not compiled again: ${second.out}`);

  await fs.writeFile(path.join(dir, 'apps/a.ts'), 'export const a: number = 2;\n');
  t.ok(make().compiled, 'a changed source compiles');
  t.match(await fs.readFile(path.join(dir, 'dist/apps/a.js'), 'utf8'), /= 2/);
  t.notOk(make().compiled, 'and then not again');

  // Added with an old time, as a checkout or an unpacked archive may.
  await fs.writeFile(path.join(dir, 'apps/b.ts'), 'export const b = 1;\n');
  const old = new Date('2001-01-01T00:00:00Z');
  await fs.utimes(path.join(dir, 'apps/b.ts'), old, old);
  t.ok(make().compiled, 'an added source compiles, whatever its time');
  t.ok(await fs.stat(path.join(dir, 'dist/apps/b.js')));

  await fs.rm(path.join(dir, 'apps/b.ts'));
  t.ok(make().compiled, 'a removed source compiles');
  t.equal(await fs.stat(path.join(dir, 'dist/apps/b.js')).catch(() => undefined), undefined);

  await touch('tsconfig.build.json');
  t.ok(make().compiled, 'changed settings compile');

  // package.json names the module type and the dependencies the output runs
  // with; the stamp is made newer after it, so only the build reacts.
  await touch('package.json');
  await fs.utimes(stamp, new Date(Date.now() + 1000), new Date(Date.now() + 1000));
  t.ok(make().compiled, 'a changed package.json compiles');
});

void t.test('a build whose bundling fails fails, and keeps the last good dist/', async (t) => {
  const dir = await scratchTree(t);
  await fs.writeFile(path.join(dir, 'apps/client/main.ts'), "process.stdout.write('good');\n");
  const stamp = path.join(dir, 'install-stamp');
  await fs.writeFile(stamp, '');
  const make = () =>
    spawnSync('make', ['build', `STAMP=${stamp}`], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, MAKEFLAGS: '' },
    });
  t.equal(make().status, 0, 'a good tree builds');
  // A side-effect import of a module that is not there: the compiler
  // accepts it (it does not check such imports), the bundler cannot.
  await fs.writeFile(path.join(dir, 'apps/client/main.ts'), "import './missing.js';\n");
  const failed = make();
  t.not(failed.status, 0, `the build fails: ${failed.stdout}${failed.stderr}`);
  t.equal(
    await fs
      .readFile(path.join(dir, 'dist/apps/client/main.js'), 'utf8')
      .then((m) => /good/.test(m)),
    true,
    'dist/ is the last good build',
  );
  t.not(make().status, 0, 'and fails again: a failed build is not recorded as done');
});
