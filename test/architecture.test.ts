import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');

interface Violation {
  rule: { name: string };
  from: string;
  to: string;
}

void t.test('the boundary rules catch each kind of violation in the fixture tree', async (t) => {
  const fixture = path.join(root, 'test/fixtures/depcruise');
  const bin = path.join(root, 'node_modules/.bin/depcruise');
  const result = await run(
    bin,
    [
      '--config',
      path.join(root, '.dependency-cruiser.cjs'),
      '--output-type',
      'json',
      'kernel',
      'platform',
      'modules',
      'apps',
    ],
    { cwd: fixture, maxBuffer: 16 * 1024 * 1024 },
  ).catch((err: unknown) => err as { stdout: string });
  const report = JSON.parse(result.stdout) as { summary: { violations: Violation[] } };
  const found = report.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`).sort();
  t.same(found, [
    'kernel-is-pure: kernel/bad/index.ts -> platform/pg/index.ts',
    'modules-are-isolated: modules/beta/index.ts -> modules/alpha/app/use-case.ts',
    'modules-only-through-index: apps/server/main.ts -> modules/alpha/app/use-case.ts',
  ]);
});
