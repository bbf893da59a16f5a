/**
 * The rule that keeps the API client (apps/client) off the server's code
 * catches an import of the kernel and of a module, and lets the client's own
 * files, node built-ins and the client's tests through.
 */
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

void t.test('client-is-standalone catches the client importing the server', async (t) => {
  const result = await run(
    path.join(root, 'node_modules/.bin/depcruise'),
    [
      '--config',
      path.join(root, '.dependency-cruiser.cjs'),
      '--output-type',
      'json',
      'apps',
      'kernel',
      'modules',
    ],
    { cwd: path.join(root, 'test/fixtures/depcruise-client'), maxBuffer: 16 * 1024 * 1024 },
  ).catch((err: unknown) => err as { stdout: string });
  const report = JSON.parse(result.stdout) as { summary: { violations: Violation[] } };
  t.same(report.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`).sort(), [
    'client-is-standalone: apps/client/bad.ts -> kernel/ids/index.ts',
    'client-is-standalone: apps/client/bad.ts -> modules/alpha/index.ts',
  ]);
});
