/**
 * The client's process ends after its last write: `client
 * transfer` as a real child process (from source through tsx) against a
 * real HTTP server on 127.0.0.1 (node:http answering `GET /api/v1/me` and
 * the transfer with a marked 201). When the client sent with fetch, two
 * requests on one keep-alive connection made V8 tier up undici's
 * WebAssembly HTTP parser on its background threads, and the process
 * waited for that compilation at exit: 140 to 260 ms after the result was
 * printed, with nothing left to do. It now sends with node:http (no
 * WebAssembly); nothing but the runtime's shutdown should follow the
 * result, and no idle keep-alive connection may hold the process open.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';

const root = path.resolve(import.meta.dirname, '../..');

/** The milliseconds from the child's last output to its exit. */
async function gapAfterLastWrite(args: readonly string[], env: Record<string, string>) {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(root, 'apps/client/main.ts'), ...args],
    {
      cwd: root,
      env: {
        PATH: process.env['PATH'] ?? '/usr/bin:/bin',
        HOME: process.env['HOME'] ?? '/tmp',
        _TAPJS_PROCESSINFO_COVERAGE_: '0',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let last = 0;
  let out = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString();
    last = performance.now();
  });
  child.stderr.on('data', () => {
    last = performance.now();
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return { gap: performance.now() - last, code, out };
}

void t.test('client transfer exits after its last write, three times in a row', async (t) => {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/api/v1/me') {
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
        res.end('{"id":"0190f2a4-1b2c-7d3e-8f40-00000000aaaa","kind":"user","display_name":"P"}');
        return;
      }
      res.writeHead(201, {
        'content-type': 'application/json; charset=utf-8',
        'idempotent-replay': 'false',
      });
      res.end(
        '{"id":"0190f2a4-1b2c-7d3e-8f40-00000000bbbb","amount":1,"from_account_id":"a","to_account_id":"b"}',
      );
    });
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  t.teardown(() => {
    srv.closeAllConnections();
    srv.close();
  });
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-exit-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const env = {
    CLIENT_BASE_URL: `http://127.0.0.1:${String((srv.address() as AddressInfo).port)}`,
    CLIENT_TOKEN: 'tok',
    CLIENT_OUTBOX: path.join(dir, 'outbox.sqlite'),
  };
  const gaps: number[] = [];
  for (let i = 0; i < 3; i += 1) {
    const run = await gapAfterLastWrite(
      [
        'transfer',
        '--from',
        '0190f2a4-1b2c-7d3e-8f40-000000000001',
        '--to',
        '0190f2a4-1b2c-7d3e-8f40-000000000002',
        '--amount',
        '1',
        '--again',
      ],
      env,
    );
    t.equal(run.code, 0, run.out);
    gaps.push(run.gap);
  }
  gaps.sort((a, b) => a - b);
  // Printed, not asserted: a time is judged by a benchmark on a quiet
  // machine, never by a test (a loaded CI machine moves it by 5x).
  t.comment(
    `from the last write to exit: ${gaps.map((g) => g.toFixed(0)).join(', ')} ms (about 230 with fetch and no flags, 28 with fetch and the WebAssembly flags, on a quiet machine)`,
  );
});
