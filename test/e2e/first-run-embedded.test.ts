/**
 * What `make run` does on a fresh data directory: the server starts its
 * embedded PostgreSQL, migrates, creates the local principal and prints a
 * sequence that works as printed (real port, real token); a restart on the
 * same data prints the same token with fresh keys.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { LOCAL_PRINCIPAL_FILE } from '../../apps/server/first-run.js';
import { startServerProcess, type ServerProcess } from '../harness/process.js';
import { captureStdout, stopProcesses } from './processes.js';
import { printedQuickstart, runScript } from './quickstart-script.js';

/** Resolves once the process has printed the whole sequence; rejects if it exits first. */
async function banner(p: ServerProcess, out: () => string): Promise<string> {
  while (!out().includes('"$BASE/api/v1/accounts/$B"')) {
    if (p.child.exitCode !== null || p.child.signalCode !== null)
      throw new Error(`server exited before printing; stderr: ${p.stderr()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return out();
}

void t.test('make run on a fresh data directory prints a sequence that works', async (t) => {
  // The data directory itself is made here: the embedded server opens it to
  // the postgres OS user when running as root, so it must not sit inside a
  // private folder.
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'make-run-'));
  const processes: ServerProcess[] = [];
  t.teardown(async () => {
    await stopProcesses(processes);
    await fs.rm(dataDir, { recursive: true, force: true });
  });
  const env = {
    DATABASE__EMBEDDED_DATA_DIR: dataDir,
    DATABASE__EMBEDDED_PORT: '0',
    HTTP__PORT: '0',
    LOG__LEVEL: 'warn',
  };

  const first = startServerProcess(['--role', 'all', '--migrate'], env);
  processes.push(first);
  const firstOut = await banner(first, captureStdout(first));
  t.match(firstOut, /is up \(role all\) on http:\/\/127\.0\.0\.1:\d+\n/);
  t.match(firstOut, /Created the principal "Local developer"/);
  const file = path.join(dataDir, LOCAL_PRINCIPAL_FILE);
  t.equal((await fs.stat(file)).mode & 0o777, 0o600, 'the token file is private');
  const saved = JSON.parse(await fs.readFile(file, 'utf8')) as { token: string };

  const script = printedQuickstart(firstOut);
  t.match(script, `\nTOKEN=${saved.token}\n`, 'the real token');
  const run = await runScript(script);
  const [openA, openB, transfer, replay, readA, readB] = run.results;
  t.same(
    run.results.map((r) => r.status),
    [201, 201, 201, 201, 200, 200],
  );
  t.equal(transfer?.headers.get('idempotent-replay'), null);
  t.equal(replay?.headers.get('idempotent-replay'), 'true');
  t.equal(replay?.body, transfer?.body, 'a byte-identical replay');
  const balance = (body: string | undefined): number =>
    (JSON.parse(body ?? '') as { balance: number }).balance;
  const opening = (body: string | undefined): number =>
    (JSON.parse(body ?? '') as { opening_balance: number }).opening_balance;
  const amount = (JSON.parse(transfer?.requestBody ?? '') as { amount: number }).amount;
  t.equal(balance(readA?.body), opening(openA?.requestBody) - amount, 'A changed once');
  t.equal(balance(readB?.body), opening(openB?.requestBody) + amount, 'B changed once');
  t.same(await stopProcesses([first]), [0], 'stops cleanly with its embedded server');

  const second = startServerProcess(['--role', 'api'], env);
  processes.push(second);
  const secondOut = await banner(second, captureStdout(second));
  t.match(secondOut, /Using the principal "Local developer"/);
  const again = printedQuickstart(secondOut);
  t.match(again, `\nTOKEN=${saved.token}\n`, 'the same token after a restart');
  const keysOf = (text: string): string[] =>
    [...text.matchAll(/Idempotency-Key: ([^']+)'/g)].map((m) => m[1] ?? '');
  t.equal(keysOf(again).length, 4);
  t.same(
    keysOf(again).filter((k) => keysOf(script).includes(k)),
    [],
    'fresh keys',
  );
  t.same(await stopProcesses([second]), [0]);
});
