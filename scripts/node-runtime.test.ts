/**
 * The runtime bootstrap: the version rule, the choice between the node on
 * PATH and the pinned copy, the integrity check of the download, and the one
 * line make prints, with real node binaries and the real npm registry
 * package.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import {
  ROOT,
  chooseNode,
  ensurePinned,
  installDir,
  parseVersion,
  readPin,
  satisfiesCaret,
  sriOf,
  verifyIntegrity,
} from './node-runtime.mjs';

const run = promisify(execFile);
const SCRIPT = path.join(ROOT, 'scripts', 'node-runtime.mjs');
const RUNTIME_DIR = path.join(ROOT, '.runtime');
const HOST = { platform: process.platform, arch: process.arch };

function tempDir(t: Test): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'node-runtime-'));
  t.teardown(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

void t.test('versions and caret ranges', (t) => {
  t.same(parseVersion('v24.22.3'), [24, 22, 3]);
  t.same(parseVersion('20.20.2'), [20, 20, 2]);
  t.throws(() => parseVersion('v24'), /not a version of the form X\.Y\.Z/);
  t.throws(() => parseVersion('24.1.0-nightly'), /not a version/);
  const range = '^24.11.0';
  const cases: [string, boolean][] = [
    ['v20.20.2', false],
    ['v22.18.0', false],
    ['v24.10.9', false],
    ['v24.11.0', true],
    ['v24.11.5', true],
    ['v24.22.3', true],
    ['v25.0.0', false],
    ['v26.1.0', false],
  ];
  for (const [version, expected] of cases) {
    t.equal(satisfiesCaret(version, range), expected, `${version} in ${range}`);
  }
  t.equal(satisfiesCaret('v24.11.0', '^24.11.1'), false, 'an older patch is outside');
  t.throws(() => satisfiesCaret('v24.0.0', '>=24'), /engines\.node must be a caret range/);
  t.end();
});

void t.test('the pin in package.json is coherent', (t) => {
  const pin = readPin(ROOT);
  t.ok(satisfiesCaret(pin.version, pin.range), 'the pinned version satisfies engines.node');
  t.match(pin.integrity['linux-x64'], /^sha512-[A-Za-z0-9+/]+=*$/, 'linux-x64 is pinned');
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    devDependencies: Record<string, string>;
  };
  t.equal(
    parseVersion(pkg.devDependencies['@types/node'] ?? '')[0],
    parseVersion(pin.version)[0],
    '@types/node has the major version of the runtime',
  );
  t.equal(
    process.version.split('.')[0],
    `v${String(parseVersion(pin.version)[0])}`,
    'this test runs on it',
  );
  t.end();
});

void t.test('readPin names the field that is missing or incoherent', (t) => {
  const dir = tempDir(t);
  const write = (pkg: unknown): void => {
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(pkg));
  };
  write({ nodeRuntime: { version: '24.22.3', integrity: {} } });
  t.throws(() => readPin(dir), /no engines\.node/);
  write({ engines: { node: '^24.11.0' }, nodeRuntime: { integrity: {} } });
  t.throws(() => readPin(dir), /no nodeRuntime\.version/);
  write({ engines: { node: '^24.11.0' }, nodeRuntime: { version: '24.22.3' } });
  t.throws(() => readPin(dir), /no nodeRuntime\.integrity/);
  write({ engines: { node: '^24.11.0' }, nodeRuntime: { version: '22.18.0', integrity: {} } });
  t.throws(
    () => readPin(dir),
    /nodeRuntime\.version 22\.18\.0 does not satisfy engines\.node \^24\.11\.0/,
  );
  t.end();
});

void t.test('the node on PATH is used when it is in range, the pinned one otherwise', (t) => {
  const pin = { range: '^24.11.0', version: '24.22.3', integrity: {} };
  t.same(chooseNode({ version: 'v24.11.0', execPath: '/opt/node/bin/node' }, pin), {
    kind: 'path',
    execPath: '/opt/node/bin/node',
  });
  t.same(chooseNode({ version: 'v20.20.2', execPath: '/usr/bin/node' }, pin), {
    kind: 'pinned',
    version: '24.22.3',
  });
  t.same(chooseNode({ version: 'v26.0.0', execPath: '/usr/bin/node' }, pin), {
    kind: 'pinned',
    version: '24.22.3',
  });
  t.same(
    chooseNode({ version: 'v24.12.0-nightly20251201abc', execPath: '/opt/nightly/node' }, pin),
    { kind: 'pinned', version: '24.22.3' },
    'a nightly build is no supported release',
  );
  t.end();
});

void t.test('a tarball is accepted only with the pinned hash', (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, 'x.tgz');
  fs.writeFileSync(file, 'the bytes of a tarball');
  const good = sriOf(file);
  t.match(good, /^sha512-/);
  t.doesNotThrow(() => {
    verifyIntegrity(file, good);
  });
  fs.appendFileSync(file, '!');
  t.throws(
    () => {
      verifyIntegrity(file, good);
    },
    new RegExp(
      `x\\.tgz does not match the integrity pinned in package\\.json \\(expected ${good.replace(/[+/]/g, '\\$&')}, got sha512-`,
    ),
  );
  t.throws(() => {
    verifyIntegrity(file, 'sha1-abc');
  }, /must be sha512/);
  t.end();
});

void t.test('a download that does not match the pin installs nothing', (t) => {
  const dir = tempDir(t);
  const pin = readPin(ROOT);
  const key = `${HOST.platform}-${HOST.arch}`;
  const wrong = { ...pin, integrity: { [key]: `sha512-${Buffer.alloc(64).toString('base64')}` } };
  t.throws(() => ensurePinned(wrong, dir, HOST), /does not match the integrity pinned/);
  t.notOk(fs.existsSync(installDir(dir, pin.version, key)), 'no runtime installed');
  t.same(fs.readdirSync(dir), [], 'no staging folder left behind');
  t.end();
});

void t.test(
  'the pinned runtime installs from the npm registry, is reused, and a damaged one is named',
  (t) => {
    const dir = tempDir(t);
    const pin = readPin(ROOT);
    const key = `${HOST.platform}-${HOST.arch}`;
    const abandoned = path.join(dir, '.staging-2147483646-dead');
    fs.mkdirSync(abandoned);
    const installed = ensurePinned(pin, dir, HOST);
    t.equal(installed, installDir(dir, pin.version, key));
    const bin = path.join(installed, 'bin', 'node');
    t.equal(execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim(), `v${pin.version}`);
    t.equal(
      fs.readFileSync(path.join(installed, '.complete'), 'utf8'),
      `${pin.integrity[key] ?? ''}\n`,
      'the marker records the hash it was checked against',
    );
    t.notOk(fs.existsSync(abandoned), "an interrupted install's staging folder is removed");
    t.same(fs.readdirSync(dir), [path.basename(installed)], 'nothing but the runtime is left');
    t.equal(ensurePinned(pin, dir, HOST), installed, 'reused as it is');
    fs.rmSync(bin);
    t.throws(
      () => ensurePinned(pin, dir, HOST),
      /is incomplete \(no bin\/node\): remove that folder/,
    );
    fs.rmSync(path.join(installed, '.complete'));
    t.throws(
      () => ensurePinned(pin, dir, HOST),
      /was not installed by make \(no \.complete\): remove it/,
    );
    t.end();
  },
);

void t.test('a platform without a pinned hash is told what to do', (t) => {
  const dir = tempDir(t);
  t.throws(
    () => ensurePinned(readPin(ROOT), dir, { platform: 'sunos', arch: 'sparc' }),
    /no Node\.js 24\.22\.3 is pinned for sunos-sparc \(nodeRuntime\.integrity\): install a Node\.js that satisfies \^24\.11\.0/,
  );
  t.end();
});

void t.test('run by a node in range, the script keeps that node', async (t) => {
  const { stdout, stderr } = await run(process.execPath, [SCRIPT], {
    env: { ...process.env, PATH: '/usr/bin:/bin', NODE_RUNTIME_DIR: RUNTIME_DIR },
  });
  t.equal(stdout, `${path.dirname(process.execPath)}\n`);
  t.equal(stderr, `node ${process.version}: ${process.execPath} (on PATH, satisfies ^24.11.0)\n`);
});

void t.test("run by the machine's own node, the script picks by that node's version", async (t) => {
  // These machines ship Node.js 20 as /usr/bin/node: the script must fall
  // back to the pinned copy (installed by make, or now). Where the machine's
  // node is in range, it is kept.
  const machineNode = '/usr/bin/node';
  t.ok(fs.existsSync(machineNode), 'the machine has a node of its own');
  const version = execFileSync(machineNode, ['--version'], { encoding: 'utf8' }).trim();
  const { stdout, stderr } = await run(machineNode, [SCRIPT], {
    env: { ...process.env, PATH: '/usr/bin:/bin', NODE_RUNTIME_DIR: RUNTIME_DIR },
  });
  const pin = readPin(ROOT);
  if (satisfiesCaret(version, pin.range)) {
    t.equal(stdout, '/usr/bin\n');
    t.match(stderr, /\(on PATH, satisfies/);
  } else {
    const bin = path.join(
      installDir(RUNTIME_DIR, pin.version, `${HOST.platform}-${HOST.arch}`),
      'bin',
    );
    t.equal(stdout, `${bin}\n`);
    t.match(stderr, `(the pinned copy; the node on PATH is ${version}, outside ${pin.range})\n`);
    const pinned = execFileSync(path.join(bin, 'node'), ['--version'], { encoding: 'utf8' });
    t.equal(pinned.trim(), `v${pin.version}`, 'the pinned copy runs');
  }
});

void t.test(
  "make names the node it uses in one line and runs every step with it: with the machine's node first on PATH",
  async (t) => {
    // Standard input is not a socket (as a child's pipes are): bash would then
    // read the system bashrc, as it does for a remote shell.
    const make = spawn(
      'make',
      ['--no-print-directory', '-s', '-f', path.join(ROOT, 'Makefile'), 'node-version'],
      {
        cwd: ROOT,
        // The machine's own environment (its CA certificates and proxies,
        // should make have to fetch), with only its node on PATH.
        env: { ...process.env, PATH: '/usr/bin:/bin', NODE_RUNTIME_DIR: RUNTIME_DIR },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    make.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    make.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise((resolve) => make.on('exit', resolve));
    t.equal(code, 0, stderr);
    const lines = stderr.split('\n').filter((l) => l !== '');
    t.equal(lines.length, 1, stderr);
    const machine = execFileSync('/usr/bin/node', ['--version'], { encoding: 'utf8' }).trim();
    const pin = readPin(ROOT);
    if (satisfiesCaret(machine, pin.range)) {
      t.match(lines[0], `node ${machine}: /usr/bin/node (on PATH, satisfies ${pin.range})`);
      t.equal(stdout.trim(), machine);
    } else {
      t.match(lines[0], `node v${pin.version}: `);
      t.match(lines[0], `(the pinned copy; the node on PATH is ${machine}, outside ${pin.range})`);
      t.equal(
        stdout.trim(),
        `v${pin.version}`,
        'the recipe ran the pinned node, not the one on PATH',
      );
    }
  },
);
