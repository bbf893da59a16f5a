/**
 * The plugin as a Fastify user gets it: `make pack`'s tarball installed
 * with npm into an application in a temporary folder outside the
 * repository (test/fixtures/package-app), type-checked against the
 * package's declarations, and run with Node.js's type stripping. Over real
 * sockets, with the in-memory store: 16 parallel duplicates move the
 * amount once, a repeat is the first answer byte for byte with
 * `Idempotent-Replay: true`, another body under the key is 422, and a
 * repeat while the first still runs is 409 once the wait is over.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import {
  PACKAGE_NAME,
  PACKAGED_FOLDERS,
  importedPackages,
  packIdempotency,
} from '../scripts/pack-idempotency.js';

const root = path.resolve(import.meta.dirname, '..');

interface Answer {
  readonly status: number;
  readonly replay: string | null;
  readonly body: string;
}

void t.test('importedPackages reads the packages emitted code imports', (t) => {
  const code = [
    "import fp from 'fastify-plugin';",
    "import { a } from './a.js';",
    "import { randomUUID } from 'node:crypto';",
    "export { b } from '@fastify/error';",
    "import 'side-effect/sub';",
    "const c = await import('canonicalize');",
    "import type { FastifyInstance } from 'fastify';",
    'const text = \'import x from "inside-a-string"\';',
  ].join('\n');
  t.same(importedPackages(code), [
    '@fastify/error',
    'canonicalize',
    'fastify',
    'fastify-plugin',
    'side-effect',
  ]);
  t.end();
});

void t.test(
  'a plugin that reaches outside its folders, or imports a package the repository does not pin, is not packed',
  async (t) => {
    // A copy of what the pack reads, the compiler and packages linked.
    const copy = await fs.mkdtemp(path.join(os.tmpdir(), 'pack-refusals-'));
    t.teardown(() => fs.rm(copy, { recursive: true, force: true }));
    for (const f of ['tsconfig.json', 'package.json', 'kernel', 'platform/http/idempotency']) {
      await fs.cp(path.join(root, f), path.join(copy, f), { recursive: true });
    }
    await fs.symlink(path.join(root, 'node_modules'), path.join(copy, 'node_modules'));
    const entry = path.join(copy, 'platform/http/idempotency/in-memory.ts');
    const original = await fs.readFile(entry, 'utf8');

    await fs.writeFile(
      entry,
      `${original}export { systemClock } from '../../../kernel/clock/index.js';\n`,
    );
    await t.rejects(packIdempotency(copy, path.join(copy, 'out')), {
      message:
        /^the plugin reaches files outside its package .*: kernel\/clock\/clock\.d\.ts, .*kernel\/clock\/index\.js$/,
    });

    await fs.writeFile(entry, original);
    const manifest = JSON.parse(await fs.readFile(path.join(copy, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    delete manifest.dependencies['canonicalize'];
    await fs.writeFile(path.join(copy, 'package.json'), JSON.stringify(manifest));
    await t.rejects(packIdempotency(copy, path.join(copy, 'out')), {
      message: 'the plugin imports canonicalize, which package.json does not depend on',
    });

    await fs.writeFile(entry, `${original}export const broken: number = 'text';\n`);
    await t.rejects(packIdempotency(copy, path.join(copy, 'out')), {
      message: /^the plugin did not compile:\n.*in-memory\.ts.*TS2322/s,
    });
    await t.rejects(fs.stat(path.join(copy, 'out')), 'no tarball folder was made');
  },
);

void t.test(
  'the packed plugin, installed into an app outside the repository, keeps every rule',
  async (t) => {
    const work = await fs.mkdtemp(path.join(os.tmpdir(), 'package-app-'));
    t.teardown(() => fs.rm(work, { recursive: true, force: true }));
    const { tarball, manifest, files } = await packIdempotency(root, path.join(work, 'tarball'));

    t.equal(manifest.name, PACKAGE_NAME);
    t.same(Object.keys(manifest.exports), ['.', './in-memory'], 'two entry points');
    t.same(
      manifest.dependencies,
      {
        '@fastify/error': '4.3.0',
        canonicalize: '5.1.0',
        'fastify-plugin': '6.0.0',
        'jsonc-parser': '3.3.1',
      },
      'what its code imports, at the versions the repository runs',
    );
    t.same(
      manifest.peerDependencies,
      { '@opentelemetry/api': '^1', fastify: '^5' },
      "Fastify is the host, and the OpenTelemetry API the application's",
    );
    const code = files.filter((f) => f !== 'package.json' && f !== 'README.md');
    t.ok(code.length > 0);
    t.same(
      code.filter((f) => !PACKAGED_FOLDERS.some((d) => f.startsWith(d))),
      [],
      'only the plugin and the kernel folders it imports',
    );
    t.same(
      code.filter((f) => f.includes('.test.')),
      [],
      'no test file',
    );

    const app = path.join(work, 'app');
    await fs.cp(path.join(root, 'test/fixtures/package-app'), app, { recursive: true });
    const rootManifest = JSON.parse(await fs.readFile(path.join(root, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    // npm without NODE_OPTIONS: tap's coverage loader is no business of npm's.
    const env = { ...process.env, NODE_OPTIONS: '' };
    execFileSync(
      'npm',
      [
        'install',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        '--loglevel=error',
        tarball,
        `fastify@${rootManifest.dependencies['fastify'] ?? ''}`,
        `@types/node@${rootManifest.devDependencies['@types/node'] ?? ''}`,
      ],
      { cwd: app, env, stdio: 'pipe' },
    );
    const installed = JSON.parse(
      await fs.readFile(path.join(app, 'node_modules', PACKAGE_NAME, 'package.json'), 'utf8'),
    ) as { name: string };
    t.equal(installed.name, PACKAGE_NAME, 'installed from the tarball');

    // The application type-checks against the package's declarations alone.
    try {
      execFileSync(path.join(root, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], {
        cwd: app,
        env,
        stdio: 'pipe',
      });
      t.pass('the app type-checks against the installed package');
    } catch (err) {
      t.fail(`tsc: ${(err as { stdout?: Buffer }).stdout?.toString() ?? String(err)}`);
    }

    const child = spawn(process.execPath, ['app.ts'], {
      cwd: app,
      env,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    t.teardown(() => {
      child.kill('SIGKILL');
    });
    const port = await new Promise<string>((resolve, reject) => {
      child.once('exit', (code) => {
        reject(new Error(`the app exited with ${String(code)} before it listened`));
      });
      createInterface({ input: child.stdout }).on('line', (line) => {
        const m = /^listening (\d+)$/.exec(line);
        if (m?.[1] !== undefined) resolve(m[1]);
      });
    });
    const base = `http://127.0.0.1:${port}`;
    const post = async (key: string, body: object, owner = 'owner-a'): Promise<Answer> => {
      const res = await fetch(`${base}/transfers`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-owner': owner },
        body: JSON.stringify(body),
      });
      return {
        status: res.status,
        replay: res.headers.get('idempotent-replay'),
        body: await res.text(),
      };
    };
    const moved = async (): Promise<number[]> =>
      ((await (await fetch(`${base}/moved`)).json()) as { moved: number[] }).moved;

    // 16 parallel duplicates: one move, one first answer, the rest replays of it.
    const key = newId();
    const answers = await Promise.all(Array.from({ length: 16 }, () => post(key, { amount: 25 })));
    t.same(await moved(), [25], 'the amount moved once');
    const first = answers.filter((a) => a.replay === 'false');
    t.equal(first.length, 1, 'one first answer');
    t.equal(first[0]?.status, 201);
    for (const a of answers) {
      t.equal(a.status, 201);
      t.equal(a.body, first[0]?.body, 'every answer is the first one, byte for byte');
    }
    const repeat = await post(key, { amount: 25 });
    t.same(
      repeat,
      { status: 201, replay: 'true', body: first[0]?.body },
      'a later repeat is the stored answer with Idempotent-Replay: true',
    );

    const reuse = await post(key, { amount: 26 });
    t.equal(reuse.status, 422, 'another body under the key');
    t.match(JSON.parse(reuse.body), { code: 'idempotency_key_reuse' });

    // Another owner's key of the same value is another key.
    const other = await post(key, { amount: 7 }, 'owner-b');
    t.equal(other.status, 201);
    t.equal(other.replay, 'false', "another owner's key runs on its own");

    // A repeat while the first still runs: 409 once the plugin's wait is over.
    await fetch(`${base}/close-gate`, { method: 'POST' });
    const slowKey = newId();
    const slow = post(slowKey, { amount: 9, slow: true });
    // The first is at the gate, in its handler, its key taken, before the repeat is sent.
    while (((await (await fetch(`${base}/at-gate`)).json()) as { waiting: number }).waiting < 1) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const during = await post(slowKey, { amount: 9, slow: true });
    t.equal(during.status, 409, 'a repeat while the first runs');
    t.match(JSON.parse(during.body), { code: 'request_in_progress' });
    await fetch(`${base}/open-gate`, { method: 'POST' });
    const done = await slow;
    t.equal(done.status, 201, 'the first ends with its own answer');
    t.same(await moved(), [25, 7, 9], 'and its move alone');
    const after = await post(slowKey, { amount: 9, slow: true });
    t.same(after, { status: 201, replay: 'true', body: done.body }, 'then replays');
  },
);
