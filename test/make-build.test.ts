/**
 * `make build` (which `make run`, `make principal` and `make migrate`
 * start with) compiles only when what it reads changed: the project's
 * Makefile and TypeScript settings, copied with their times into a
 * temporary tree with one small source file, and the real compiler (the
 * checkout's node_modules, linked). An unchanged tree does not compile; a
 * changed, added or removed source does.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';

const root = path.resolve(import.meta.dirname, '..');

void t.test('make build compiles only when an input changed', async (t) => {
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
  for (const d of ['apps', 'kernel', 'platform', 'modules']) {
    await fs.mkdir(path.join(dir, d));
  }
  await fs.writeFile(path.join(dir, 'apps/a.ts'), 'export const a: number = 1;\n');
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
