/**
 * The command line: flags and environment read into settings, each bad one
 * refused in one line naming it (exit 2); and the commands run in this
 * process against the whole application on a real PostgreSQL (listening on
 * 127.0.0.1), with their human and JSON output and their exit codes. The
 * entry point itself runs as a child process once for its exit status and
 * its quiet standard error.
 */
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs/promises';
import { closeSync, openSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { startTestApp } from '../../test/harness/app.js';
import { EXIT, parseCommandLine, runCli, UsageError } from './cli.js';
import { transferIntent } from './client.js';
import { newKey, Outbox } from './outbox.js';

const root = path.resolve(import.meta.dirname, '../..');

async function tempDir(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-cli-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

const ID_A = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
const ID_B = '0190f2a4-1b2c-7d3e-8f40-123456789abd';

void t.test('flags and environment become settings; flags win', (t) => {
  const env = {
    CLIENT_OUTBOX: '/tmp/env.sqlite',
    CLIENT_BASE_URL: 'http://127.0.0.1:3999',
    CLIENT_TOKEN: 'env-token',
    CLIENT_KEY_TTL: '12h',
    CLIENT_TIMEOUT: '5s',
  };
  const c = parseCommandLine(
    ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '2500', '--token', 'flag-token'],
    env,
  );
  t.match(c, {
    kind: 'transfer',
    from: ID_A,
    to: ID_B,
    amount: 2500,
    independent: false,
    settings: {
      outbox: '/tmp/env.sqlite',
      baseUrl: 'http://127.0.0.1:3999',
      token: 'flag-token',
      keyTtlMs: 12 * 3_600_000,
      ttlMarginMs: 3_600_000,
      timeoutMs: 5_000,
      waitMs: 30_000,
      retryBaseMs: 200,
      retryCapMs: 30_000,
      concurrency: 4,
      json: false,
    },
  });
  t.match(parseCommandLine(['accounts', 'create', '--name', ' Checking ', '--json'], env), {
    kind: 'accounts-create',
    name: ' Checking ',
    openingBalance: 0,
    settings: { json: true },
  });
  t.match(parseCommandLine(['outbox', 'list', '--state', 'failed', '--outbox', 'x.sqlite'], {}), {
    kind: 'outbox-list',
    state: 'failed',
    settings: { outbox: 'x.sqlite' },
  });
  t.match(parseCommandLine(['outbox', 'drain', '--wait', '0', '--concurrency', '1'], env), {
    kind: 'outbox-drain',
    settings: { waitMs: 0, concurrency: 1 },
  });
  t.same(parseCommandLine(['--help'], {}), { kind: 'help' });
  t.same(parseCommandLine([], {}), { kind: 'help' });
  t.end();
});

void t.test('each bad flag or variable is refused in one line naming it', (t) => {
  const env = { CLIENT_OUTBOX: 'o.sqlite', CLIENT_BASE_URL: 'http://h', CLIENT_TOKEN: 'x' };
  const transfer = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '1'];
  const cases: [string[], Record<string, string>, RegExp][] = [
    [
      ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '0'],
      env,
      /^--amount must be an integer from 1/,
    ],
    [['transfer', '--from', ID_A, '--to', ID_B, '--amount', '1.5'], env, /^--amount/],
    [['transfer', '--from', ID_A, '--to', ID_B, '--amount', '99999999999999999'], env, /^--amount/],
    [['transfer', '--from', 'nope', '--to', ID_B, '--amount', '1'], env, /^--from must be a UUID/],
    [['transfer', '--to', ID_B, '--amount', '1'], env, /^--from is required/],
    [['transfer', '--from', ID_A, '--amount', '1'], env, /^--to is required/],
    [['transfer', '--from', ID_A, '--to', ID_B], env, /^--amount is required/],
    [
      [...transfer, '--key', '0190f2a4-1b2c-4d3e-8f40-123456789abc'],
      env,
      /^--key must be a UUIDv7/,
    ],
    [[...transfer, '--frm', 'x'], env, /^unknown flag --frm/],
    [[...transfer, '--amount'], env, /^--amount needs a value/],
    [[...transfer, 'extra'], env, /^unexpected argument "extra"/],
    [[...transfer, '--state', 'done'], env, /^--state does not belong to "transfer"/],
    [transfer, { ...env, CLIENT_OUTBOX: '' }, /^--outbox or CLIENT_OUTBOX is required/],
    [transfer, { ...env, CLIENT_TOKEN: '' }, /^--token or CLIENT_TOKEN is required/],
    [
      transfer,
      { ...env, CLIENT_BASE_URL: 'ftp://h' },
      /^CLIENT_BASE_URL must be an http or https origin/,
    ],
    [
      [...transfer, '--base-url', 'http://h/api'],
      env,
      /^--base-url must be an http or https origin/,
    ],
    [transfer, { ...env, CLIENT_KEY_TTL: '24 hours' }, /^CLIENT_KEY_TTL must be a duration/],
    [[...transfer, '--key-ttl', '0s'], env, /^--key-ttl must be a duration of at least 1ms/],
    [
      [...transfer, '--key-ttl', '24h', '--ttl-margin', '24h'],
      env,
      /^--ttl-margin \(24h\) must be less than --key-ttl \(24h\)/,
    ],
    [
      [...transfer, '--ttl-margin', '1s', '--timeout', '1s'],
      env,
      /^--timeout \(1s\) must be less than --ttl-margin/,
    ],
    [transfer, { ...env, CLIENT_WAIT: '-1s' }, /^CLIENT_WAIT must be a duration/],
    // Timers hold at most 2^31 - 1 ms: a longer one fires after 1 ms.
    [
      [...transfer, '--key-ttl', '40d', '--ttl-margin', '30d', '--timeout', '25d'],
      env,
      /^--timeout must be a duration of at most 24d, got "25d"/,
    ],
    [[...transfer, '--wait', '25d'], env, /^--wait must be a duration of at most 24d/],
    [[...transfer, '--retry-cap', '25d'], env, /^--retry-cap must be a duration of at most 24d/],
    [
      [...transfer, '--outbox', 'file:o.sqlite?nolock=1'],
      env,
      /^--outbox must be a file path, not a file: URI/,
    ],
    [
      transfer,
      { ...env, CLIENT_CONCURRENCY: '0' },
      /^CLIENT_CONCURRENCY must be an integer from 1 to 64/,
    ],
    [
      [...transfer, '--retry-base', '10s', '--retry-cap', '1s'],
      env,
      /^--retry-base \(10s\) must not exceed --retry-cap/,
    ],
    [['accounts', 'create'], env, /^--name is required/],
    [
      ['accounts', 'create', '--name', '   '],
      env,
      /^--name must be 1 to 100 characters, not blank/,
    ],
    [
      ['accounts', 'create', '--name', 'x', '--opening-balance=-1'],
      env,
      /^--opening-balance must be an integer from 0/,
    ],
    [['accounts', 'delete'], env, /^unknown command "accounts delete"/],
    [['outbox', 'list', '--state', 'lost'], env, /^--state must be one of pending, done, failed/],
    [['outbox'], env, /^unknown command "outbox"/],
    [['send'], env, /^unknown command "send"/],
  ];
  for (const [argv, e, message] of cases) {
    t.throws(() => parseCommandLine(argv, e), { name: 'UsageError', message }, argv.join(' '));
    try {
      parseCommandLine(argv, e);
    } catch (err) {
      t.notOk((err as Error).message.includes('\n'), 'one line');
    }
  }
  t.ok(new UsageError('x') instanceof Error);
  t.end();
});

/** Captures what a command writes. */
function io() {
  let out = '';
  let err = '';
  return {
    stdout: {
      write: (s: string, done?: (err?: Error | null) => void) => {
        out += s;
        done?.();
        return true;
      },
    },
    stderr: { write: (s: string) => ((err += s), true) },
    out: () => out,
    err: () => err,
  };
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

void t.test('the commands against the real server, in this process', async (t) => {
  const k = await startTestApp(t);
  const address = await k.app.http.listen({ host: '127.0.0.1', port: 0 });
  const dir = await tempDir(t);
  const env = {
    CLIENT_OUTBOX: path.join(dir, 'outbox.sqlite'),
    CLIENT_BASE_URL: address,
    CLIENT_TOKEN: k.alice.token,
  };
  const run = async (argv: string[], e: Record<string, string> = env) => {
    const o = io();
    const code = await runCli(argv, e, o);
    return { code, out: o.out(), err: o.err() };
  };

  const a = await run(['accounts', 'create', '--name', 'Checking', '--opening-balance', '10000']);
  t.equal(a.code, EXIT.ok, a.err);
  t.match(a.out, /^account [0-9a-f-]{36} "Checking" opened with balance 10000\n$/);
  const b = await run(['accounts', 'create', '--name', 'Savings', '--json']);
  t.equal(b.code, EXIT.ok);
  const bJson = JSON.parse(b.out) as { intent: { answer: { body: { id: string } } } };
  const idA = /account ([0-9a-f-]{36})/.exec(a.out)?.[1] ?? '';
  const idB = bJson.intent.answer.body.id;

  const tr = await run(['transfer', '--from', idA, '--to', idB, '--amount', '2500', '--json']);
  t.equal(tr.code, EXIT.ok, tr.err);
  const doc = JSON.parse(tr.out) as Record<string, unknown>;
  t.match(doc, {
    command: 'transfer',
    exit_code: 0,
    stopped_by: 'target',
    pending: 0,
    intent: {
      operation: 'createTransfer',
      method: 'POST',
      path: '/api/v1/transfers',
      request: { from_account_id: idA, to_account_id: idB, amount: 2500 },
      lanes: [`account:${idA}`, `account:${idB}`],
      state: 'done',
      failure: null,
      attempts: 1,
      answer: {
        status: 201,
        replayed: false,
        headers: { location: /^\/api\/v1\/transfers\// },
        body: { amount: 2500, from_account_id: idA, to_account_id: idB },
      },
    },
  });
  t.match(tr.err, /^\{"event":"principal"/m, 'progress events are JSON lines on standard error');

  const poor = await run(['transfer', '--from', idB, '--to', idA, '--amount', '999999']);
  t.equal(poor.code, EXIT.rejected, 'a final error answer exits 1');
  t.match(poor.out, /^transfer [0-9a-f-]{36}: refused: 409 conflict \(insufficient_funds\)/);

  const list = await run(['outbox', 'list']);
  t.equal(list.code, EXIT.ok);
  t.match(list.out, /done\s+createAccount/);
  t.match(list.out, /done\s+createTransfer .*201/);
  t.match(list.out, /done\s+createTransfer .*409 conflict/);
  const listed = await run(['outbox', 'list', '--json', '--state', 'done']);
  const l = JSON.parse(listed.out) as { intents: unknown[]; principal_id: string };
  t.equal(l.intents.length, 4);
  t.equal(l.principal_id, k.alice.id, 'bound to the token principal');

  t.match(await run(['outbox', 'drain']), { code: EXIT.ok, out: /nothing pending/ });

  // Bob's token on Alice's outbox: refused before anything is sent.
  const pending = await run(
    ['transfer', '--from', idA, '--to', idB, '--amount', '1', '--wait', '0'],
    { ...env, CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}` },
  );
  t.equal(pending.code, EXIT.pending, 'server unreachable: the intent stays pending, exit 75');
  t.match(pending.out, /still pending/);
  t.match(pending.err, /ECONNREFUSED/);
  const bob = await run(['outbox', 'drain'], { ...env, CLIENT_TOKEN: k.bob.token });
  t.equal(bob.code, EXIT.outbox);
  t.match(bob.err, /^client: outbox .* belongs to principal .*; the token is principal/);
  t.match(await run(['outbox', 'drain'], { ...env, CLIENT_TOKEN: 'wrong' }), {
    code: EXIT.unauthenticated,
    err: /401/,
  });
  const drained = await run(['outbox', 'drain', '--json']);
  t.equal(drained.code, EXIT.ok);
  t.equal((JSON.parse(drained.out) as { settled: unknown[] }).settled.length, 1);
  t.match(JSON.parse(drained.out), {
    command: 'outbox drain',
    pending: 0,
    settled: [{ state: 'done' }],
  });

  // The same key for another request: refused locally, nothing sent.
  // A key of the caller's, made now (a key made over a day ago would be expired).
  const key = newKey();
  t.equal(
    (await run(['transfer', '--from', idA, '--to', idB, '--amount', '3', '--key', key])).code,
    EXIT.ok,
  );
  const again = await run(['transfer', '--from', idA, '--to', idB, '--amount', '3', '--key', key]);
  t.equal(again.code, EXIT.ok, 'the same intent again answers from the outbox');
  t.match(again.out, /from the outbox/);
  const other = await run(['transfer', '--from', idA, '--to', idB, '--amount', '4', '--key', key]);
  t.equal(other.code, EXIT.failed);
  t.match(other.err, /^client: key .* is in outbox .* already, for another request/);

  // The same command again after it was left pending (exit 75): the
  // pending intent is delivered, no second one is stated (stating a second
  // one would move the money twice).
  const down = { ...env, CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}` };
  const argv = ['transfer', '--from', idA, '--to', idB, '--amount', '7', '--wait', '0'];
  const first = await run(argv, down);
  t.equal(first.code, EXIT.pending);
  t.match(first.out, /--key [0-9a-f-]{36}/, 'the key to repeat it with is shown');
  const before = (await run(['outbox', 'list', '--json'])).out;
  const count = (text: string) => (JSON.parse(text) as { intents: unknown[] }).intents.length;
  const repeated = await run(argv.slice(0, -2));
  t.equal(repeated.code, EXIT.failed, 'refused: an intent for this request is pending');
  t.match(repeated.err, /^client: .*pending .*[0-9a-f-]{36}.*outbox drain.*--again/);
  t.equal(count((await run(['outbox', 'list', '--json'])).out), count(before), 'none stated');
  const drainedAgain = await run(['outbox', 'drain']);
  t.equal(drainedAgain.code, EXIT.ok, 'the pending one is delivered by a drain');
  const deliberate = await run([...argv.slice(0, -2), '--again']);
  t.equal(deliberate.code, EXIT.ok, '--again states a second transfer on purpose');
  t.equal(count((await run(['outbox', 'list', '--json'])).out), count(before) + 1);

  // A second process of the client on the same file is refused.
  const held = Outbox.open(env.CLIENT_OUTBOX);
  const locked = await run(['outbox', 'list']);
  held.close();
  t.equal(locked.code, EXIT.outbox);
  t.match(locked.err, /^client: outbox .* is in use by another process/);
});

void t.test(
  'expired keys are reported, not sent; corrupt and unreadable files exit 4',
  async (t) => {
    const k = await startTestApp(t);
    const address = await k.app.http.listen({ host: '127.0.0.1', port: 0 });
    const dir = await tempDir(t);
    const file = path.join(dir, 'outbox.sqlite');
    const short = ['--key-ttl', '1500ms', '--ttl-margin', '1s', '--timeout', '500ms'];
    const env = { CLIENT_OUTBOX: file, CLIENT_TOKEN: k.alice.token };
    const run = async (argv: string[], e: Record<string, string>) => {
      const o = io();
      return { code: await runCli(argv, e, o), out: o.out(), err: o.err() };
    };
    const down = `http://127.0.0.1:${String(await closedPort())}`;
    const queued = await run(['accounts', 'create', '--name', 'Late', '--wait', '0', ...short], {
      ...env,
      CLIENT_BASE_URL: down,
    });
    t.equal(queued.code, EXIT.pending);
    await new Promise((r) => setTimeout(r, 600));
    const late = await run(['outbox', 'drain', ...short, '--json'], {
      ...env,
      CLIENT_BASE_URL: address,
    });
    t.equal(late.code, EXIT.failed, late.err);
    t.equal((JSON.parse(late.out) as { settled: unknown[] }).settled.length, 1);
    t.match(JSON.parse(late.out), {
      settled: [{ state: 'failed', failure: 'expired', answer: null }],
    });
    t.match(late.err, /"event":"expired"/);
    const human = await run(['outbox', 'list'], env);
    t.match(human.out, /failed\s+createAccount .*expired/);
    t.same(
      await k.tdb.owner`select id from ledger_accounts`,
      [],
      'the expired intent was never sent',
    );

    const db = new DatabaseSync(file);
    db.exec(`update intents set lanes = 'x'`);
    db.close();
    const corrupt = await run(['outbox', 'list'], env);
    t.equal(corrupt.code, EXIT.outbox);
    t.match(corrupt.err, /^client: outbox .* row 1 is corrupt: lanes is not JSON/);
    t.equal(corrupt.err.split('\n').length, 2, 'one line');

    const garbage = path.join(dir, 'garbage.sqlite');
    await fs.writeFile(garbage, 'x'.repeat(4096));
    const bad = await run(['outbox', 'list'], { CLIENT_OUTBOX: garbage });
    t.equal(bad.code, EXIT.outbox);
    t.match(
      bad.err,
      /^client: cannot open outbox .*garbage.sqlite: the file is not a database \(or its header is damaged\): if it is an outbox, restore it from a copy, or move it aside to start a new one\n$/,
    );
    t.match(await run(['outbox', 'list'], { CLIENT_OUTBOX: dir }), {
      code: EXIT.outbox,
      err: /cannot open/,
    });
    const missing = path.join(dir, 'typo.sqlite');
    t.match(await run(['outbox', 'list'], { CLIENT_OUTBOX: missing }), {
      code: EXIT.outbox,
      err: new RegExp(`^client: cannot open outbox ${missing}: the file does not exist\n$`),
    });
    await t.rejects(fs.access(missing), { code: 'ENOENT' }, 'outbox list creates no file');
    t.match(await run(['outbox', 'list', '--json'], { CLIENT_OUTBOX: '' }), {
      code: EXIT.usage,
      err: /^client: --outbox or CLIENT_OUTBOX is required; see client --help\n$/,
    });
    t.match(await run(['--help'], {}), {
      code: EXIT.ok,
      out: /client transfer --from ID --to ID --amount N/,
    });
  },
);

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

void t.test('outbox list names an attempt cut off before its answer', async (t) => {
  const file = path.join(await tempDir(t), 'outbox.sqlite');
  const outbox = Outbox.open(file);
  const { intent } = outbox.enqueue({
    operation: 'createTransfer',
    method: 'POST',
    path: '/api/v1/transfers',
    body: { from_account_id: ID_A, to_account_id: ID_B, amount: 1 },
    lanes: [],
  });
  outbox.close();
  // What a process killed during its first attempt leaves behind.
  const db = new DatabaseSync(file);
  db.exec(`update intents set attempts = 1, attempt_started_at = ${String(Date.now())}`);
  db.close();
  const human = io();
  t.equal(await runCli(['outbox', 'list'], { CLIENT_OUTBOX: file }, human), EXIT.ok);
  t.match(
    human.out(),
    new RegExp(
      `pending\\s+createTransfer ${intent.key} .*pending \\(attempts 1, the last cut off before its answer: it may have reached the server\\)`,
    ),
  );
  const machine = io();
  await runCli(['outbox', 'list', '--json'], { CLIENT_OUTBOX: file }, machine);
  t.match(JSON.parse(machine.out()), {
    intents: [{ key: intent.key, attempts: 1, attempt_started_at: /^\d{4}-/ }],
  });
});

void t.test(
  'unmarked refusals after a lost attempt are reported as an unknown outcome',
  async (t) => {
    let posts = 0;
    const server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url === '/api/v1/me') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ id: 'p1' }));
          return;
        }
        posts += 1;
        // The first attempt is lost on the way back; the repeats meet a
        // gateway's 404, which carries no Idempotent-Replay (an
        // unmarked answer is repeated once, so two of them).
        if (posts === 1) {
          res.socket?.destroy();
          return;
        }
        res.writeHead(404, { 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ code: 'not_found', detail: 'no route (gateway)' }));
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.teardown(() => {
      server.closeAllConnections();
      server.close();
    });
    const { port } = server.address() as net.AddressInfo;
    const env = {
      CLIENT_OUTBOX: path.join(await tempDir(t), 'outbox.sqlite'),
      CLIENT_BASE_URL: `http://127.0.0.1:${String(port)}`,
      CLIENT_TOKEN: 'tok',
    };
    const o = io();
    const argv = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5'];
    const code = await runCli([...argv, '--retry-base', '1ms', '--retry-cap', '1ms'], env, o);
    t.equal(code, EXIT.failed, o.err());
    t.equal(posts, 3, 'repeated once after the first unmarked answer, not after the second');
    t.match(
      o.out(),
      /^transfer [0-9a-f-]{36}: FAILED: outcome unknown: 404 not_found: no route \(gateway\) without Idempotent-Replay, so not the key's stored answer .*an attempt may have taken effect: check the balances of both accounts \(GET \/api\/v1\/accounts\/\{id\}\) before stating it again as a new intent/,
    );
    const listed = io();
    await runCli(['outbox', 'list', '--json'], env, listed);
    t.match(JSON.parse(listed.out()), {
      intents: [
        {
          state: 'failed',
          failure: 'outcome_unknown',
          attempts: 3,
          answer: { status: 404, replayed: false, marked: false },
        },
      ],
    });
    const human = io();
    await runCli(['outbox', 'list'], env, human);
    t.match(human.out(), /failed\s+createTransfer .*outcome unknown: 404 not_found/);
  },
);

void t.test('a 2xx whose body is null or not JSON is printed, not a crash', async (t) => {
  const bodies = ['null', 'not json', '[1]'];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/api/v1/me') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'p1' }));
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json', 'idempotent-replay': 'false' });
      res.end(bodies.shift() ?? '{}');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as net.AddressInfo;
  const env = {
    CLIENT_OUTBOX: path.join(await tempDir(t), 'outbox.sqlite'),
    CLIENT_BASE_URL: `http://127.0.0.1:${String(port)}`,
    CLIENT_TOKEN: 'tok',
  };
  for (const [i, argv] of [
    ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5'],
    ['accounts', 'create', '--name', 'N'],
    ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '6'],
  ].entries()) {
    const o = io();
    const code = await runCli(argv, env, o);
    t.equal(code, EXIT.ok, `answer ${String(i)}: ${o.err()}`);
    t.notMatch(o.err(), /a bug/);
    t.match(o.out(), /201.*not the JSON object this API answers/);
  }
});

void t.test(
  'killed after the answer was recorded, before it was printed: a rerun is refused, --key prints it',
  async (t) => {
    // Changed: the rerun printed the recorded answer and exited 0,
    // so a new command equal to an intent settled by a drain or a library
    // caller exited 0 with an old answer while it sent nothing. It is now
    // refused like a pending one; --key prints the answer.
    const file = path.join(await tempDir(t), 'outbox.sqlite');
    const outbox = Outbox.open(file);
    const { intent } = outbox.enqueue(
      transferIntent({ from_account_id: ID_A, to_account_id: ID_B, amount: 5 }),
    );
    // What a process killed between recordFinal and its print leaves behind
    // (or a drain, or a library caller, that settled it).
    outbox.recordAttempt(intent.seq, 1, Date.now());
    outbox.recordFinal(intent.seq, {
      attempts: 1,
      state: 'done',
      failure: null,
      answer: {
        status: 201,
        replayed: false,
        marked: true,
        headers: {},
        body: JSON.stringify({ id: 't1', amount: 5, from_account_id: ID_A, to_account_id: ID_B }),
      },
      now: Date.now(),
    });
    outbox.close();
    const env = {
      CLIENT_OUTBOX: file,
      CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}`,
      CLIENT_TOKEN: 'tok',
    };
    const argv = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5', '--wait', '0'];
    const o = io();
    const code = await runCli(argv, env, o);
    t.equal(code, EXIT.failed, `refused, never 0 for an intent it did not state: ${o.err()}`);
    t.match(
      o.err(),
      new RegExp(`^client: .*${intent.key}.*done.*--key ${intent.key}.*prints its answer.*--again`),
    );
    t.equal(o.out(), '', 'no answer printed as if this command had stated it');
    const json = io();
    t.equal(await runCli([...argv, '--json'], env, json), EXIT.failed);
    t.equal(json.out(), '');
    const unreported = Outbox.open(file);
    t.equal(unreported.list().length, 1, 'no new intent, no new key');
    t.equal(unreported.get(intent.key)?.reportedAt, null);
    unreported.close();
    // --key names it: its recorded answer is printed and it is reported.
    const byKey = io();
    t.equal(await runCli([...argv, '--key', intent.key], env, byKey), EXIT.ok, byKey.err());
    t.match(byKey.out(), new RegExp(`^transfer ${intent.key}: 201 created: transfer t1 moved 5`));
    const after = Outbox.open(file);
    const intents = after.list();
    after.close();
    t.equal(intents.length, 1, 'no new intent, no new key');
    t.match(intents[0], { key: intent.key, reportedAt: Number });
    // Reported now: the same command states a new transfer, as asked.
    const next = await runCli(argv, env, io());
    t.equal(next, EXIT.pending);
    const last = Outbox.open(file);
    t.equal(last.list().length, 2);
    last.close();
  },
);

void t.test(
  'an intent is marked reported only once its result has left, never on a write error',
  async (t) => {
    const file = path.join(await tempDir(t), 'outbox.sqlite');
    const outbox = Outbox.open(file);
    const { intent } = outbox.enqueue(
      transferIntent({ from_account_id: ID_A, to_account_id: ID_B, amount: 5 }),
    );
    outbox.recordAttempt(intent.seq, 1, Date.now());
    outbox.recordFinal(intent.seq, {
      attempts: 1,
      state: 'done',
      failure: null,
      answer: { status: 201, replayed: false, marked: true, headers: {}, body: '{"id":"t1"}' },
      now: Date.now(),
    });
    outbox.close();
    const env = {
      CLIENT_OUTBOX: file,
      CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}`,
      CLIENT_TOKEN: 'tok',
    };
    const argv = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5', '--key', intent.key];
    // A pipe whose reader went away: the write fails after it was called.
    let err = '';
    const broken = {
      stdout: {
        write: (_s: string, done?: (e?: Error | null) => void) => {
          setImmediate(() => done?.(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' })));
          return false;
        },
      },
      stderr: { write: (s: string) => ((err += s), true) },
    };
    t.equal(
      await runCli(argv, env, broken),
      74,
      'exit 74: the result was not seen, never 1 (refused) or 0',
    );
    t.match(err, /standard output.*EPIPE.*not marked reported/);
    const unreported = Outbox.open(file);
    t.equal(unreported.get(intent.key)?.reportedAt, null, 'not reported: nobody saw it');
    unreported.close();
    // A write that has not left yet: the command waits for it.
    let release: (() => void) | undefined;
    const slow = {
      stdout: {
        write: (_s: string, done?: (e?: Error | null) => void) => {
          release = () => done?.();
          return false;
        },
      },
      stderr: { write: () => true },
    };
    let ended = false;
    const running = runCli(argv, env, slow).then((code) => ((ended = true), code));
    await new Promise((r) => setTimeout(r, 50));
    t.equal(ended, false, 'the command waits for its result to leave');
    t.ok(release, 'the result was written');
    release?.();
    t.equal(await running, EXIT.ok);
    const reported = Outbox.open(file);
    t.type(reported.get(intent.key)?.reportedAt, 'number', 'reported once written');
    reported.close();
  },
);
