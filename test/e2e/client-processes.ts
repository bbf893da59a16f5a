/**
 * Helpers of the client's end-to-end tests: the client's command line as a
 * real child process (from source through tsx), and an HTTP proxy in front
 * of the server that can hold a transfer's request or its answer, so a test
 * knows the client has sent and not yet heard back.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Test } from 'tap';

const root = path.resolve(import.meta.dirname, '../..');

/** A running client process. */
export interface ClientProcess {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  /** Standard output so far. */
  stdout(): string;
  /** Standard error so far. */
  stderr(): string;
  /** The JSON progress events so far (`--json` writes them to standard error). */
  readonly events: Record<string, unknown>[];
  /** Resolves with the first event matching; rejects when the process exits first. */
  waitForEvent(match: (e: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  /** Resolves with the exit code and signal. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts `apps/client/main.ts` with the arguments and a minimal environment.
 *
 * @param args command line.
 * @param env `CLIENT_*` variables.
 * @param t the test that owns the process: its teardown kills it, so a
 *   test that fails before the process ends leaves none behind (a kill
 *   after the exit does nothing). `runClient` waits for the exit itself.
 * @returns the process.
 */
export function startClient(
  args: readonly string[],
  env: Record<string, string>,
  t?: Test,
): ClientProcess {
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
  let out = '';
  let err = '';
  let partial = '';
  const events: Record<string, unknown>[] = [];
  const waiters: {
    match: (e: Record<string, unknown>) => boolean;
    resolve: (e: Record<string, unknown>) => void;
  }[] = [];
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => {
    err += c.toString();
    partial += c.toString();
    let nl: number;
    while ((nl = partial.indexOf('\n')) >= 0) {
      const line = partial.slice(0, nl);
      partial = partial.slice(nl + 1);
      if (!line.startsWith('{')) continue;
      const e = JSON.parse(line) as Record<string, unknown>;
      events.push(e);
      for (const w of [...waiters]) {
        if (w.match(e)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(e);
        }
      }
    }
  });
  t?.teardown(() => {
    child.kill('SIGKILL');
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => {
      resolve({ code, signal });
    });
  });
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    events,
    exited,
    waitForEvent: (match) => {
      const found = events.find(match);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        waiters.push({ match, resolve });
        void exited.then(({ code }) => {
          reject(new Error(`client exited (${String(code)}) before the event; stderr: ${err}`));
        });
      });
    },
  };
}

/**
 * Runs the client to its end.
 *
 * @param args command line.
 * @param env `CLIENT_*` variables.
 * @returns exit code, standard output and the progress events.
 */
export async function runClient(
  args: readonly string[],
  env: Record<string, string>,
): Promise<{ code: number | null; out: string; err: string; events: Record<string, unknown>[] }> {
  const p = startClient(args, env);
  const { code } = await p.exited;
  return { code, out: p.stdout(), err: p.stderr(), events: p.events };
}

/** What the proxy does with `POST /api/v1/transfers`. */
export type HoldMode = 'pass' | 'hold-request' | 'hold-answer';

/** A proxy in front of the server. */
export interface HoldProxy {
  /** Its origin. */
  readonly base: string;
  /** What it does with transfers now. */
  mode: HoldMode;
  /** Resolves when a transfer was held: its request (hold-request) or its answer (hold-answer). */
  held(): Promise<{ status: number | null; body: string; key: string }>;
}

/**
 * Starts an HTTP proxy on 127.0.0.1 forwarding to `upstream`.
 *
 * @param t the test (teardown closes it).
 * @param upstream the server's origin.
 * @returns the proxy.
 */
export async function startHoldProxy(t: Test, upstream: string): Promise<HoldProxy> {
  const target = new URL(upstream);
  let notify: ((h: { status: number | null; body: string; key: string }) => void) | undefined;
  const heldOnce = new Promise<{ status: number | null; body: string; key: string }>(
    (r) => (notify = r),
  );
  const proxy: HoldProxy = {
    base: '',
    mode: 'pass',
    held: () => heldOnce,
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const isTransfer = req.method === 'POST' && req.url === '/api/v1/transfers';
      const key = String(req.headers['idempotency-key'] ?? '');
      if (isTransfer && proxy.mode === 'hold-request') {
        notify?.({ status: null, body: '', key });
        return; // never forwarded, never answered
      }
      const up = http.request(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url,
          headers: req.headers,
        },
        (answer) => {
          const body: Buffer[] = [];
          answer.on('data', (c: Buffer) => body.push(c));
          answer.on('end', () => {
            if (isTransfer && proxy.mode === 'hold-answer') {
              notify?.({
                status: answer.statusCode ?? null,
                body: Buffer.concat(body).toString(),
                key,
              });
              return; // the server answered; the client never hears it
            }
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            res.end(Buffer.concat(body));
          });
        },
      );
      up.on('error', () => {
        res.destroy();
      });
      up.end(Buffer.concat(chunks));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  return Object.assign(proxy, { base: `http://127.0.0.1:${String(port)}` });
}
