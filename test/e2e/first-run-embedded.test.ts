/**
 * What `make run` does on a fresh data directory: the server starts its
 * embedded PostgreSQL, migrates, creates the local principal and prints a
 * sequence on standard error that works as printed (real port, the real
 * token file; the token itself is never printed); a restart on the same
 * data uses the same token, with fresh keys.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { LOCAL_PRINCIPAL_FILE } from '../../apps/server/first-run.js';
import { startServerProcess, type ServerProcess } from '../harness/process.js';
import { captureStdout, stopProcesses } from './processes.js';
import { printedQuickstart, runScript } from './quickstart-script.js';

/**
 * Resolves once the process has printed the whole sequence on standard
 * error; rejects if it exits first.
 */
async function banner(p: ServerProcess): Promise<string> {
  while (!p.stderr().includes('"$BASE/api/v1/accounts/$B"')) {
    if (p.child.exitCode !== null || p.child.signalCode !== null)
      throw new Error(`server exited before printing; stderr: ${p.stderr()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return p.stderr();
}

/** The line of the sequence that reads the token from its file. */
function tokenLine(file: string): string {
  return `\nTOKEN=$(sed -E 's/.*"token":"([^"]+)".*/\\1/' ${file})\n`;
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
  const firstStdout = captureStdout(first);
  const firstOut = await banner(first);
  t.match(firstOut, /is up \(role all\) on http:\/\/127\.0\.0\.1:\d+\n/);
  t.match(firstOut, /Created the principal "Local developer"/);
  const file = path.join(dataDir, LOCAL_PRINCIPAL_FILE);
  t.equal((await fs.stat(file)).mode & 0o777, 0o600, 'the token file is private');
  const saved = JSON.parse(await fs.readFile(file, 'utf8')) as { token: string };

  const script = printedQuickstart(firstOut);
  t.ok(script.includes(tokenLine(file)), 'the sequence reads the real token file');
  t.notOk(firstOut.includes(saved.token), 'the token is not printed on standard error');
  t.notOk(firstStdout().includes(saved.token), 'nor on standard output');
  t.notOk(firstStdout().includes('# 1. '), 'the banner is not on the JSON log stream');
  const run = await runScript(script);
  const [openA, openB, transfer, replay, readA, readB] = run.results;
  t.same(
    run.results.map((r) => r.status),
    [201, 201, 201, 201, 200, 200],
  );
  t.equal(transfer?.headers.get('idempotent-replay'), 'false');
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
  const secondStdout = captureStdout(second);
  const secondOut = await banner(second);
  t.match(secondOut, /Using the principal "Local developer"/);
  const again = printedQuickstart(secondOut);
  t.ok(again.includes(tokenLine(file)), 'the same token file after a restart');
  t.notOk(secondOut.includes(saved.token) || secondStdout().includes(saved.token), 'never printed');
  t.equal((await runScript(again)).results[0]?.status, 201, 'and its token still works');
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
