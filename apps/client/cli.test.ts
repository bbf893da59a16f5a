/**
 * The commands run in this process against the whole application on a
 * real PostgreSQL (listening on 127.0.0.1), with their human and JSON
 * output and their exit codes: accounts, transfers, the outbox list and
 * drain, a wrong token or principal, a key used for another request, the
 * same command again while its intent is pending, a second process on the
 * file, expired keys, and corrupt, unreadable or missing files.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t from 'tap';
import { startTestApp } from '../../test/harness/app.js';
import { EXIT, runCli } from './cli.js';
import { closedPort, io, tempDir } from './cli-fixture.js';
import { newKey, Outbox } from './outbox.js';

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
    // The key is usable for 1.5 s less a 1 s margin. The drain judges the
    // age on both clocks, the server's read from its Date header in whole
    // seconds, so the wait leaves seconds of slack, not 100 ms (with 600 ms
    // this failed once on a loaded machine).
    await new Promise((r) => setTimeout(r, 2100));
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
