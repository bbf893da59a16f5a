import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { projectRoot } from '../../platform/migrate/index.js';
import { REQUIRED_NODE, runtimeRefusal } from './node-version.js';

void t.test('the range the server needs is the one package.json states', (t) => {
  const pkg = JSON.parse(readFileSync(path.join(projectRoot(), 'package.json'), 'utf8')) as {
    engines: { node: string };
  };
  t.equal(REQUIRED_NODE, pkg.engines.node);
  t.end();
});

void t.test('a Node.js outside the range is refused, naming the version needed', (t) => {
  for (const version of ['20.20.2', '22.18.0', '24.10.9', '25.0.0', '26.1.0']) {
    const refusal = runtimeRefusal(version);
    t.match(refusal, /needs Node\.js \^24\.11\.0/, `${version} refused`);
    t.match(refusal, `this is Node.js ${version}`, `${version} named`);
  }
  for (const version of ['24.11.0', '24.11.7', '24.22.3', '24.100.0']) {
    t.equal(runtimeRefusal(version), undefined, `${version} accepted`);
  }
  t.match(runtimeRefusal('24.x'), /needs Node\.js/, 'an unreadable version is refused too');
  t.end();
});

void t.test(
  'the server started on an older Node.js exits 1 with one line before it does anything',
  async (t) => {
    // The process runs on this Node.js with its version reported as 20's:
    // the entry point must refuse before any module reads a newer API.
    const older =
      "data:text/javascript,Object.defineProperty(process.versions,'node',{value:'20.20.2'});" +
      "Object.defineProperty(process,'version',{value:'v20.20.2'});";
    const child = spawn(
      process.execPath,
      ['--import', older, '--import', 'tsx', 'apps/server/main.ts', '--role', 'api'],
      {
        cwd: projectRoot(),
        env: {
          PATH: process.env['PATH'] ?? '/usr/bin:/bin',
          HOME: process.env['HOME'] ?? '/tmp',
          _TAPJS_PROCESSINFO_COVERAGE_: '0',
          HTTP__PORT: '0',
          METRICS__PORT: '0',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    t.teardown(() => child.kill('SIGKILL'));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    t.equal(code, 1, 'exit status 1');
    t.match(stderr, /^This server needs Node\.js \^24\.11\.0 .*this is Node\.js 20\.20\.2/);
    t.equal(stderr.trim().split('\n').length, 1, `one line: ${stderr}`);
    t.equal(stdout, '', 'nothing started, nothing logged');
  },
);
