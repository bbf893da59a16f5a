/**
 * `make pack`: the idempotency plugin (platform/http/idempotency) as an npm
 * tarball a Fastify application outside this repository installs. The
 * plugin's two entry points (`index.ts`, and `in-memory.ts` as
 * `./in-memory`) are compiled with the repository's TypeScript settings
 * and declarations into a staging folder; what the compiler emits is
 * checked to be the plugin and the kernel folders it may import (a file of
 * the server in the package means the plugin stopped being a leaf); the
 * npm packages the emitted code and declarations import become its
 * dependencies, at the repository's versions (Fastify and the OpenTelemetry
 * API peers of their major versions); then `npm pack`. See
 * docs/DECISIONS.md, "The plugin's package".
 *
 * Usage: `tsx scripts/pack-idempotency.ts [destination]` (default
 * `dist-pack`, which `make build` does not replace);
 * prints the tarball's path.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package's name on npm: what the plugin does, no service name. */
export const PACKAGE_NAME = 'fastify-idempotency';

/** Where the emitted files may come from: the plugin and the kernel folders it reaches. */
export const PACKAGED_FOLDERS: readonly string[] = [
  'platform/http/idempotency/',
  'kernel/idempotency/',
  'kernel/txn/',
  'kernel/errs/',
  'kernel/ids/',
  'kernel/context/',
  'kernel/actor/',
];

const PLUGIN = 'platform/http/idempotency';

/**
 * Packages the plugin's code imports at run time and expects its host to
 * provide: Fastify, and the OpenTelemetry API, whose one copy must be the
 * one the application's SDK registers with (OpenTelemetry's advice for
 * instrumented libraries).
 */
const PEERS = new Set(['fastify', '@opentelemetry/api']);

/** What {@link packIdempotency} made. */
export interface PackResult {
  /** The tarball's absolute path. */
  readonly tarball: string;
  /** The generated package.json. */
  readonly manifest: PackageManifest;
  /** The files in the package, relative to its root, sorted. */
  readonly files: readonly string[];
}

/** The fields of the generated package.json. */
export interface PackageManifest {
  readonly name: string;
  readonly version: string;
  readonly description: string;
  readonly type: 'module';
  readonly license: string;
  readonly engines: Readonly<Record<string, string>>;
  readonly exports: Readonly<Record<string, { types: string; default: string }>>;
  readonly dependencies: Readonly<Record<string, string>>;
  readonly peerDependencies: Readonly<Record<string, string>>;
}

interface RootManifest {
  readonly version: string;
  readonly license: string;
  readonly engines: Record<string, string>;
  readonly dependencies: Record<string, string>;
}

async function listFiles(dir: string, base = dir): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await listFiles(full, base)));
    else out.push(path.relative(base, full).split(path.sep).join('/'));
  }
  return out.sort();
}

/**
 * The npm packages emitted JavaScript imports (static `import`/`export ...
 * from` and dynamic `import('...')`), without node built-ins and relative
 * paths; a scoped package by its scope and name.
 */
export function importedPackages(code: string): string[] {
  const found = new Set<string>();
  const patterns = [
    /^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]/gm,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  for (const pattern of patterns) {
    for (const match of code.matchAll(pattern)) {
      const spec = match[1] ?? '';
      if (spec.startsWith('.') || spec.startsWith('node:') || spec.startsWith('/')) continue;
      const parts = spec.split('/');
      found.add(spec.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? spec));
    }
  }
  return [...found].sort();
}

/**
 * Builds the tarball.
 *
 * @param root the repository's root.
 * @param destination the folder the tarball is written to (made if missing).
 * @returns the tarball, its manifest and its files.
 * @throws Error when the compiler fails, when it emits a file outside
 *   {@link PACKAGED_FOLDERS}, when the code imports a package the
 *   repository does not depend on, or when `npm pack` fails.
 */
export async function packIdempotency(root: string, destination: string): Promise<PackResult> {
  const rootManifest = JSON.parse(
    await fs.readFile(path.join(root, 'package.json'), 'utf8'),
  ) as RootManifest;
  const staging = await fs.mkdtemp(path.join(os.tmpdir(), 'pack-idempotency-'));
  try {
    const pkg = path.join(staging, 'package');
    const tsconfig = path.join(staging, 'tsconfig.json');
    await fs.writeFile(
      tsconfig,
      JSON.stringify({
        extends: path.join(root, 'tsconfig.json'),
        compilerOptions: {
          rootDir: root,
          outDir: pkg,
          declaration: true,
          sourceMap: false,
          noEmit: false,
          // The staging folder is outside the repository: its types are the repository's.
          typeRoots: [path.join(root, 'node_modules/@types')],
        },
        files: [path.join(root, PLUGIN, 'index.ts'), path.join(root, PLUGIN, 'in-memory.ts')],
        include: [],
      }),
    );
    try {
      execFileSync(path.join(root, 'node_modules/.bin/tsc'), ['-p', tsconfig], {
        cwd: root,
        stdio: 'pipe',
      });
    } catch (err) {
      const out = (err as { stdout?: Buffer }).stdout?.toString() ?? String(err);
      throw new Error(`the plugin did not compile:\n${out}`);
    }
    const emitted = await listFiles(pkg);
    const outside = emitted.filter((f) => !PACKAGED_FOLDERS.some((d) => f.startsWith(d)));
    if (outside.length > 0) {
      throw new Error(
        `the plugin reaches files outside its package (${PACKAGED_FOLDERS.join(', ')}): ${outside.join(', ')}`,
      );
    }
    const imported = new Set<string>();
    // The declarations too: they import Fastify's types, which the host provides.
    for (const f of emitted.filter((e) => e.endsWith('.js') || e.endsWith('.d.ts'))) {
      for (const name of importedPackages(await fs.readFile(path.join(pkg, f), 'utf8'))) {
        imported.add(name);
      }
    }
    const dependencies: Record<string, string> = {};
    const peerDependencies: Record<string, string> = {};
    for (const name of [...imported].sort()) {
      const version = rootManifest.dependencies[name];
      if (version === undefined) {
        throw new Error(`the plugin imports ${name}, which package.json does not depend on`);
      }
      if (PEERS.has(name)) peerDependencies[name] = `^${version.split('.')[0] ?? version}`;
      else dependencies[name] = version;
    }
    const entry = (file: string): { types: string; default: string } => ({
      types: `./${PLUGIN}/${file}.d.ts`,
      default: `./${PLUGIN}/${file}.js`,
    });
    const manifest: PackageManifest = {
      name: PACKAGE_NAME,
      version: rootManifest.version,
      description:
        'A Fastify plugin whose keyed writes take effect exactly once: the Idempotency-Key row and the effect commit in one transaction.',
      type: 'module',
      license: rootManifest.license,
      engines: rootManifest.engines,
      exports: { '.': entry('index'), './in-memory': entry('in-memory') },
      dependencies,
      peerDependencies,
    };
    await fs.writeFile(path.join(pkg, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    await fs.copyFile(path.join(root, PLUGIN, 'README.md'), path.join(pkg, 'README.md'));
    await fs.mkdir(destination, { recursive: true });
    let packed: string;
    try {
      packed = execFileSync(
        'npm',
        ['pack', '--json', '--pack-destination', destination, '--loglevel=error'],
        // npm without NODE_OPTIONS: a loader meant for the tests (tap's
        // coverage) is no business of npm's.
        { cwd: pkg, encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } },
      );
    } catch (err) {
      const out = (err as { stderr?: Buffer | string }).stderr?.toString() ?? String(err);
      throw new Error(`npm pack failed: ${out}`);
    }
    const [report] = JSON.parse(packed) as { filename: string }[];
    if (report === undefined) throw new Error('npm pack wrote no tarball');
    return {
      tarball: path.resolve(destination, report.filename),
      manifest,
      files: await listFiles(pkg),
    };
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}

if (
  process.argv[1] !== undefined &&
  fileURLToPath(import.meta.url) === path.resolve(process.argv[1])
) {
  const root = path.resolve(import.meta.dirname, '..');
  const destination = path.resolve(process.argv[2] ?? path.join(root, 'dist-pack'));
  const result = await packIdempotency(root, destination);
  process.stdout.write(`${result.tarball}\n`);
}
