/**
 * The warning filter drops node:sqlite's ExperimentalWarning and nothing
 * else: in this process (through the 'warning' event) and in a child
 * process (on its standard error, where Node.js prints warnings).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import t from 'tap';
import { isSqliteExperimentalWarning, silenceSqliteExperimentalWarning } from './warnings.js';

const SQLITE = 'SQLite is an experimental feature and might change at any time';

void t.test('only the SQLite ExperimentalWarning is recognised', (t) => {
  t.ok(isSqliteExperimentalWarning(SQLITE, 'ExperimentalWarning'));
  t.ok(isSqliteExperimentalWarning(SQLITE, { type: 'ExperimentalWarning' }));
  const asError = new Error(SQLITE);
  asError.name = 'ExperimentalWarning';
  t.ok(isSqliteExperimentalWarning(asError, undefined));
  t.notOk(isSqliteExperimentalWarning(SQLITE, 'DeprecationWarning'));
  t.notOk(
    isSqliteExperimentalWarning('Type Stripping is an experimental feature', 'ExperimentalWarning'),
  );
  t.notOk(isSqliteExperimentalWarning(SQLITE, undefined), 'a plain Warning');
  t.notOk(isSqliteExperimentalWarning(42, 'ExperimentalWarning'));
  t.end();
});

void t.test('in a child process the SQLite warning is gone and others remain', (t) => {
  const script = `
    import { silenceSqliteExperimentalWarning } from ${JSON.stringify(path.join(import.meta.dirname, 'warnings.ts'))};
    silenceSqliteExperimentalWarning();
    silenceSqliteExperimentalWarning();
    process.emitWarning(${JSON.stringify(SQLITE)}, 'ExperimentalWarning');
    process.emitWarning('Something else is an experimental feature', 'ExperimentalWarning');
    process.emitWarning('an old API', 'DeprecationWarning');
  `;
  const child = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', script],
    {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        PATH: process.env['PATH'] ?? '/usr/bin:/bin',
        HOME: process.env['HOME'] ?? '/tmp',
        // A child's coverage would be merged into this run's and corrupt it.
        _TAPJS_PROCESSINFO_COVERAGE_: '0',
      },
    },
  );
  t.equal(child.status, 0, child.stderr);
  t.notMatch(child.stderr, /SQLite/);
  t.match(child.stderr, /ExperimentalWarning: Something else is an experimental feature/);
  t.match(child.stderr, /DeprecationWarning: an old API/);
  t.end();
});

void t.test('in this process the filter lets other warnings through', async (t) => {
  silenceSqliteExperimentalWarning();
  const seen: string[] = [];
  const listener = (w: Error) => seen.push(w.message);
  process.on('warning', listener);
  t.teardown(() => process.off('warning', listener));
  process.emitWarning(SQLITE, 'ExperimentalWarning');
  process.emitWarning('client test warning', 'ClientTestWarning');
  await new Promise((r) => setImmediate(r));
  t.same(seen, ['client test warning']);
});
