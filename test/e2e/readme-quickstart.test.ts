/**
 * The README's quickstart cannot rot: its code block must be exactly what
 * `make run` prints (the same renderer, with the README's example values),
 * and running it as written against a real listening server must open two
 * accounts, move the money once and replay the repeated transfer.
 */
import t from 'tap';
import { isUuidV7 } from '../../kernel/ids/index.js';
import { quickstartScript } from '../../apps/server/first-run.js';
import { testDatabase } from '../harness/db.js';
import { startServerProcess } from '../harness/process.js';
import { captureStdout, stopProcesses } from './processes.js';
import { readmeQuickstart, runScript } from './quickstart-script.js';

void t.test('the README quickstart is exactly what make run prints', async (t) => {
  const block = await readmeQuickstart();
  const base = /^BASE=(.+)$/m.exec(block)?.[1] ?? '';
  const tokenFile = /^TOKEN=\$\(sed -E '[^']+' (.+)\)$/m.exec(block)?.[1] ?? '';
  t.equal(tokenFile, '.data/pg/local-principal.json', 'the token is read from its file');
  const keys = [...block.matchAll(/Idempotency-Key: ([^']+)'/g)].map((m) => m[1] ?? '');
  t.equal(keys.length, 4, 'two accounts and the transfer twice');
  t.ok(
    keys.every((k) => isUuidV7(k)),
    'every key is a UUIDv7',
  );
  t.equal(keys[2], keys[3], 'the repeated transfer reuses its key');
  t.equal(new Set(keys).size, 3);
  t.equal(
    block,
    quickstartScript({
      baseUrl: base,
      tokenFile,
      keys: { accountA: keys[0] ?? '', accountB: keys[1] ?? '', transfer: keys[2] ?? '' },
    }),
  );
});

void t.test('the README quickstart, run as written, moves the money once', async (t) => {
  const db = await testDatabase(t);
  const env = { DATABASE__URL: db.appUrl, LOG__LEVEL: 'warn' };
  const cli = startServerProcess(['principal', 'create', '--name', 'README reader'], env);
  const cliOut = captureStdout(cli);
  t.equal(await cli.exited, 0, cli.stderr());
  const token = /token \(shown once, keep it secret\): (\S+)/.exec(cliOut())?.[1];
  if (token === undefined) throw new Error(`no token in: ${cliOut()}`);

  const server = startServerProcess(['--role', 'api'], {
    ...env,
    LOG__LEVEL: 'info',
    HTTP__PORT: '0',
  });
  const serverOut = captureStdout(server);
  t.teardown(() => stopProcesses([server]));
  const listening = await server.waitForLine((l) => l['msg'] === 'listening');
  const base = listening['address'] as string;

  const run = await runScript(await readmeQuickstart(), { BASE: base, TOKEN: token });
  const [openA, openB, transfer, replay, readA, readB, ...more] = run.results;
  if (!openA || !openB || !transfer || !replay || !readA || !readB) {
    throw new Error(`six curl commands expected, got ${String(run.results.length)}`);
  }
  t.same(more, [], 'nothing more than six commands');

  t.equal(openA.status, 201, openA.body);
  t.equal(openB.status, 201, openB.body);
  const a = run.variables.get('A') ?? '';
  const b = run.variables.get('B') ?? '';
  t.ok(isUuidV7(a) && isUuidV7(b), 'sed kept both account ids');
  t.equal((JSON.parse(openA.body) as { id: string }).id, a);
  t.equal((JSON.parse(openB.body) as { id: string }).id, b);

  t.equal(transfer.method, 'POST');
  t.equal(transfer.url, `${base}/api/v1/transfers`);
  t.equal(transfer.status, 201, transfer.body);
  t.equal(transfer.headers.get('idempotent-replay'), 'false', 'the first transfer ran');
  t.equal(replay.source, transfer.source, 'step 4 repeats step 3 exactly');
  t.equal(replay.status, 201);
  t.equal(replay.headers.get('idempotent-replay'), 'true');
  t.equal(replay.body, transfer.body, 'the replay is byte-identical');
  t.equal(replay.headers.get('location'), transfer.headers.get('location'));
  t.match(replay.output, /^HTTP\/1\.1 201 Created\n(.+\n)*idempotent-replay: true\n/);

  const opening = (r: typeof openA): number =>
    (JSON.parse(r.requestBody ?? '') as { opening_balance: number }).opening_balance;
  const amount = (JSON.parse(transfer.requestBody ?? '') as { amount: number }).amount;
  t.equal(readA.status, 200);
  t.equal(readB.status, 200);
  t.equal((JSON.parse(readA.body) as { balance: number }).balance, opening(openA) - amount);
  t.equal((JSON.parse(readB.body) as { balance: number }).balance, opening(openB) + amount);

  const transfers = await db.app<{ from_account_id: string; to_account_id: string }[]>`
    select from_account_id, to_account_id from ledger_transfers`;
  t.same(
    transfers.map((r) => [r.from_account_id, r.to_account_id]),
    [[a, b]],
    'exactly one transfer row',
  );
  const balances = await db.app<{ id: string; balance: string }[]>`
    select id, balance::text from ledger_accounts order by id`;
  t.same(
    balances.map((r) => [r.id, Number(r.balance)]),
    [
      [a, opening(openA) - amount],
      [b, opening(openB) + amount],
    ],
  );

  // With database.url set the server creates no principal and prints only
  // its JSON log lines.
  const principals = await db.app<{ n: number }[]>`select count(*)::int as n from principals`;
  t.equal(principals[0]?.n, 1, 'only the principal of the command line');
  t.same(
    serverOut()
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('{')),
    [],
    'no banner with an external database',
  );
});
