/**
 * The entry point (main.ts) as a child process: standard output that
 * cannot be written is exit 74, a bad flag is exit 2 in one line, and
 * nothing else reaches standard error.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { ID_A, ID_B, root, tempDir } from './cli-fixture.js';
import { Outbox } from './outbox.js';

void t.test(
  'the entry point: standard output that cannot be written is exit 74, not a crash with exit 1',
  async (t) => {
    const dir = await tempDir(t);
    const file = path.join(dir, 'o.sqlite');
    const o = Outbox.open(file);
    o.enqueue({
      operation: 'createAccount',
      method: 'POST',
      path: '/api/v1/accounts',
      body: { name: 'A', opening_balance: 0 },
    });
    o.close();
    const full = openSync('/dev/full', 'w');
    t.teardown(() => {
      closeSync(full);
    });
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', path.join(root, 'apps/client/main.ts'), 'outbox', 'list'],
      {
        cwd: root,
        env: {
          PATH: process.env['PATH'] ?? '/usr/bin:/bin',
          HOME: process.env['HOME'] ?? '/tmp',
          _TAPJS_PROCESSINFO_COVERAGE_: '0',
          CLIENT_OUTBOX: file,
        },
        encoding: 'utf8',
        stdio: ['ignore', full, 'pipe'],
      },
    );
    t.equal(run.status, 74, run.stderr);
    t.match(run.stderr, /^client: standard output could not be written/m);
    t.notMatch(run.stderr, /Unhandled|at .*\.js:\d+/, 'no stack trace');
  },
);

void t.test(
  'the entry point: exit 2 in one line for a bad flag, no warning on standard error',
  async (t) => {
    const dir = await tempDir(t);
    const main = path.join(root, 'apps/client/main.ts');
    const env = {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: process.env['HOME'] ?? '/tmp',
      // A child's coverage would be merged into this run's and corrupt it.
      _TAPJS_PROCESSINFO_COVERAGE_: '0',
    };
    const bad = spawnSync(
      process.execPath,
      ['--import', 'tsx', main, 'transfer', '--from', ID_A, '--to', ID_B, '--amount', 'x'],
      {
        cwd: root,
        env: {
          ...env,
          CLIENT_OUTBOX: path.join(dir, 'o.sqlite'),
          CLIENT_BASE_URL: 'http://127.0.0.1:3999',
          CLIENT_TOKEN: 't',
        },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    t.equal(bad.status, 2);
    t.equal(bad.stdout, '');
    t.match(
      bad.stderr,
      /^client: --amount must be an integer from 1 to 9007199254740991, got "x"; see client --help\n$/,
    );
    Outbox.open(path.join(dir, 'o.sqlite')).close();
    const list = spawnSync(process.execPath, ['--import', 'tsx', main, 'outbox', 'list'], {
      cwd: root,
      env: { ...env, CLIENT_OUTBOX: path.join(dir, 'o.sqlite') },
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    t.equal(list.status, 0, list.stderr);
    t.equal(list.stderr, '', 'nothing on standard error, no ExperimentalWarning');
    t.match(list.stdout, /the outbox is empty/);
  },
);
