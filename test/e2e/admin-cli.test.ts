/**
 * The admin commands while `make run` is up: `principal create` and
 * `migrate` reach the embedded PostgreSQL the running server started (its
 * lock records where it listens) instead of refusing; a second server on the
 * same folder is refused in one line; and keys are per principal, as the
 * README shows with a second principal.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { startServerProcess, type ServerProcess } from '../harness/process.js';
import { captureStdout, stopProcesses } from './processes.js';

async function createPrincipal(
  env: Record<string, string>,
  name: string,
): Promise<{ code: number | null; token: string; stderr: string }> {
  const cli = startServerProcess(['principal', 'create', '--name', name], env);
  const out = captureStdout(cli);
  const code = await cli.exited;
  return {
    code,
    token: /token \(shown once, keep it secret\): (\S+)/.exec(out())?.[1] ?? '',
    stderr: cli.stderr(),
  };
}

void t.test('admin commands share the embedded server a running server started', async (t) => {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'admin-cli-'));
  const processes: ServerProcess[] = [];
  t.teardown(async () => {
    await stopProcesses(processes);
    await fs.rm(dataDir, { recursive: true, force: true });
  });
  const env = {
    DATABASE__EMBEDDED_DATA_DIR: dataDir,
    DATABASE__EMBEDDED_PORT: '0',
    HTTP__PORT: '0',
    LOG__LEVEL: 'info',
  };
  const server = startServerProcess(['--role', 'api', '--migrate'], env);
  processes.push(server);
  const listening = await server.waitForLine((l) => l['msg'] === 'listening');
  const base = listening['address'] as string;
  const lock = JSON.parse(await fs.readFile(path.join(dataDir, 'server.lock'), 'utf8')) as {
    pid: number;
    port: number;
  };
  t.equal(lock.pid, server.child.pid, 'the lock names the server process');
  t.ok(Number.isInteger(lock.port) && lock.port > 0, 'and records where PostgreSQL listens');

  const first = await createPrincipal(env, 'First');
  t.equal(first.code, 0, first.stderr);
  const second = await createPrincipal(env, 'Second');
  t.equal(second.code, 0, second.stderr);
  t.equal(second.stderr, '', 'nothing on standard error');

  const migrate = startServerProcess(['migrate'], { ...env, LOG__LEVEL: 'warn' });
  t.equal(await migrate.exited, 0, migrate.stderr());

  // Keys are per principal: the same key and the same body, sent by two
  // principals, are two requests, each run once.
  const key = newId();
  const open = (token: string) =>
    fetch(`${base}/api/v1/accounts`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        'idempotency-key': key,
      },
      body: '{"name":"Checking","opening_balance":10000}',
    });
  const a = await open(first.token);
  const b = await open(second.token);
  const aAgain = await open(first.token);
  t.same([a.status, b.status, aAgain.status], [201, 201, 201]);
  t.equal(a.headers.get('idempotent-replay'), 'false', 'a first answer');
  t.equal(b.headers.get('idempotent-replay'), 'false', "the second principal's request ran");
  t.equal(aAgain.headers.get('idempotent-replay'), 'true', "the first principal's repeat replays");
  const [bodyA, bodyB, bodyAgain] = await Promise.all([a.text(), b.text(), aAgain.text()]);
  t.not((JSON.parse(bodyA) as { id: string }).id, (JSON.parse(bodyB) as { id: string }).id);
  t.equal(bodyAgain, bodyA);

  // A second server on the same folder is refused in one line.
  const twin = startServerProcess(['--role', 'api'], { ...env, LOG__LEVEL: 'fatal' });
  t.equal(await twin.exited, 1);
  t.equal(
    twin.stderr(),
    `the embedded PostgreSQL in ${dataDir} is in use by process ${String(server.child.pid)}: ` +
      'stop that server first, or set database.embedded_data_dir to another folder\n',
  );

  t.same(await stopProcesses([server]), [0], 'the server stops with its PostgreSQL');
  // With no server running, the command starts (and stops) the embedded one itself.
  const alone = await createPrincipal({ ...env, LOG__LEVEL: 'warn' }, 'Third');
  t.equal(alone.code, 0, alone.stderr);
  await t.rejects(fs.access(path.join(dataDir, 'server.lock')), 'and lets go of it');
});
