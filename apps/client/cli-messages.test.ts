/**
 * What the command line says at the edges, against the whole application
 * on a real PostgreSQL (listening on 127.0.0.1) and real outbox files: one
 * line per error with the server's code and detail, the reason an
 * unreachable server was not reached in the final line, ports fetch
 * refuses as usage errors, a directory the outbox cannot be written in
 * named as such, and a drain with nothing pending that still checks the
 * URL and the token.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { startTestApp } from '../../test/harness/app.js';
import { transferIntent } from './client.js';
import { EXIT, runCli } from './cli.js';
import { Outbox } from './outbox.js';
import { BAD_PORTS } from './sender-origin.js';

const root = path.resolve(import.meta.dirname, '../..');
const A = '0190f2a4-1b2c-7d3e-8f40-000000000001';
const B = '0190f2a4-1b2c-7d3e-8f40-000000000002';

function io() {
  let out = '';
  let err = '';
  return {
    stdout: {
      write: (s: string, done?: (e?: Error | null) => void) => {
        out += s;
        done?.();
        return true;
      },
    },
    stderr: {
      write: (s: string) => {
        err += s;
        return true;
      },
    },
    out: () => out,
    err: () => err,
  };
}

async function run(argv: string[], env: Record<string, string>) {
  const o = io();
  const code = await runCli(argv, env, o);
  return { code, out: o.out(), err: o.err() };
}

async function tempDir(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-messages-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

async function closedPort(): Promise<number> {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address() as net.AddressInfo;
  srv.close();
  await once(srv, 'close');
  return port;
}

void t.test('against the real server', async (t) => {
  const k = await startTestApp(t);
  const address = await k.app.http.listen({ host: '127.0.0.1', port: 0 });
  const dir = await tempDir(t);
  const env = {
    CLIENT_OUTBOX: path.join(dir, 'outbox.sqlite'),
    CLIENT_BASE_URL: address,
    CLIENT_TOKEN: k.alice.token,
  };

  await t.test('a wrong token: one line, with the code and the detail', async (t) => {
    const r = await run(['transfer', '--from', A, '--to', B, '--amount', '1', '--wait', '5s'], {
      ...env,
      CLIENT_TOKEN: 'wrong',
    });
    t.equal(r.code, EXIT.unauthenticated);
    const lines = r.err.split('\n').filter((l) => /401/.test(l));
    t.equal(lines.length, 1, r.err);
    t.match(lines[0], /^client: GET \/api\/v1\/me answered 401 unauthenticated: \S.*token/);
    t.notMatch(r.err, /\{"/, 'no JSON body');
  });

  await t.test('a drain with nothing pending checks the token and the URL', async (t) => {
    const file = path.join(await tempDir(t), 'empty.sqlite');
    const wrong = await run(['outbox', 'drain', '--outbox', file], {
      ...env,
      CLIENT_TOKEN: 'wrong',
    });
    t.equal(wrong.code, EXIT.unauthenticated, wrong.out + wrong.err);
    t.match(wrong.err, /401 unauthenticated/);
    const gone = await run(['outbox', 'drain', '--outbox', file, '--wait', '0'], {
      ...env,
      CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}`,
    });
    t.equal(gone.code, EXIT.pending, gone.out + gone.err);
    const good = await run(['outbox', 'drain', '--outbox', file], env);
    t.equal(good.code, EXIT.ok);
    t.match(good.out, /nothing pending/);
  });

  await t.test(
    'a drain that settled a refused intent exits 1, as the transfer would',
    async (t) => {
      // `client outbox drain && echo paid` must not take a refused transfer as paid.
      const file = path.join(await tempDir(t), 'refused.sqlite');
      const outbox = Outbox.open(file);
      outbox.enqueue(transferIntent({ from_account_id: A, to_account_id: B, amount: 3 }));
      outbox.close();
      const r = await run(['outbox', 'drain', '--outbox', file], env);
      t.equal(r.code, EXIT.rejected, r.out + r.err);
      t.match(r.out, /1 settled \(0 failed, 1 refused\), 0 pending/);
    },
  );

  await t.test('an unreachable server: the reason in the final line', async (t) => {
    const gone = { ...env, CLIENT_BASE_URL: `http://127.0.0.1:${String(await closedPort())}` };
    const r = await run(['transfer', '--from', A, '--to', B, '--amount', '2', '--wait', '0'], gone);
    t.equal(r.code, EXIT.pending);
    const last = r.out.trimEnd().split('\n').at(-1) ?? '';
    t.match(last, /still pending.*the server was not reached: ECONNREFUSED/, last);
    const d = await run(['outbox', 'drain', '--wait', '0'], gone);
    t.equal(d.code, EXIT.pending);
    const dLast = d.out.trimEnd().split('\n').at(-1) ?? '';
    t.match(dLast, /pending.*the server was not reached: ECONNREFUSED/, dLast);
  });
});

void t.test('a port fetch refuses is a usage error', async (t) => {
  const r = await run(['outbox', 'drain', '--base-url', 'http://127.0.0.1:1', '--token', 't'], {
    CLIENT_OUTBOX: path.join(await tempDir(t), 'o.sqlite'),
  });
  t.equal(r.code, EXIT.usage, r.err);
  t.match(r.err, /^client: --base-url .*port 1\b.*fetch refuses/);
  t.match(
    (await run(['outbox', 'drain', '--base-url', 'http://127.0.0.1:3000', '--token', 't'], {})).err,
    /--outbox/,
    'an ordinary port passes',
  );
});

void t.test('the ports refused are the ones fetch refuses', async (t) => {
  for (const port of [...BAD_PORTS, 80, 443, 3000, 8080]) {
    const reason = await fetch(`http://127.0.0.1:${String(port)}/`, {
      signal: AbortSignal.timeout(200),
    }).then(
      () => 'answered',
      (err: unknown) => String((err as { cause?: { message?: unknown } }).cause?.message),
    );
    t.equal(reason === 'bad port', BAD_PORTS.has(port), `port ${String(port)}: ${reason}`);
  }
});

void t.test('a directory the outbox cannot be written in is named', async (t) => {
  const dir = await tempDir(t);
  const place = path.join(dir, 'place');
  await fs.mkdir(place);
  const file = path.join(place, 'outbox.sqlite');
  Outbox.open(file).close();
  // A user who may write the file but not its directory, where SQLite
  // keeps the -wal file: as root, nobody (root may write anywhere).
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    await fs.chmod(dir, 0o755);
    await fs.chown(file, 65534, 65534);
    // nobody must reach the checkout's node and sources: a checkout made
    // in a private folder (mktemp -d is 0700) is opened to traversal, and
    // only for the length of the test.
    const opened: { readonly dir: string; readonly mode: number }[] = [];
    for (let d = root; ; d = path.dirname(d)) {
      const mode = (await fs.stat(d)).mode & 0o7777;
      if ((mode & 0o001) === 0) {
        opened.push({ dir: d, mode });
        await fs.chmod(d, mode | 0o001);
      }
      if (d === path.dirname(d)) break;
    }
    t.teardown(async () => {
      for (const o of opened) await fs.chmod(o.dir, o.mode);
    });
  } else {
    await fs.chmod(place, 0o555);
    t.teardown(() => fs.chmod(place, 0o755));
  }
  for (const argv of [
    ['outbox', 'list', '--outbox', file],
    ['outbox', 'drain', '--outbox', file, '--base-url', 'http://127.0.0.1:3999', '--token', 't'],
    [
      'outbox',
      'drain',
      '--outbox',
      path.join(place, 'new.sqlite'),
      '--base-url',
      'http://127.0.0.1:3999',
      '--token',
      't',
    ],
  ]) {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', path.join(root, 'apps/client/main.ts'), ...argv],
      {
        cwd: root,
        env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: '/tmp' },
        stdio: ['ignore', 'pipe', 'pipe'],
        ...(asRoot ? { uid: 65534, gid: 65534 } : {}),
      },
    );
    let err = '';
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];
    t.equal(code, EXIT.outbox, err);
    t.match(
      err,
      new RegExp(`^client: cannot open outbox .*: the directory ${place} is not writable`),
      argv.join(' '),
    );
  }
});
