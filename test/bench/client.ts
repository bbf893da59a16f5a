/**
 * The `client` scenario of the benchmark: the wall time of the built
 * command line's `client transfer` (`node dist/apps/client/main.js
 * transfer ...`) on an outbox that already exists and has nothing pending,
 * against the bench's running server, beside what no client can avoid: a
 * bare `node -e 0` and the HTTP exchanges the transfer makes (`GET
 * /api/v1/me`, then the keyed `POST /api/v1/transfers`, on one keep-alive
 * connection as the client sends them), timed with the same requests from the
 * bench's process. Each run measures the three in turn, so a busy moment
 * of the machine weighs on all of them alike. It also times the client's
 * exit after its last write (its result line), which nothing but the
 * runtime's shutdown should fill.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { newId } from '../../kernel/ids/index.js';
import type { ClientFigures } from './report.js';

/** Settings of the client scenario. */
export interface ClientOptions {
  /** The server's origin, e.g. http://127.0.0.1:3000. */
  readonly base: string;
  /** A bearer token of the principal that owns `accounts`. */
  readonly token: string;
  /** At least two accounts of that principal, with money to move. */
  readonly accounts: readonly string[];
  /** The outbox file the client uses (created by the warm-up run). */
  readonly outbox: string;
  /** The built entry point, dist/apps/client/main.js. */
  readonly main: string;
  /** Measured runs. */
  readonly runs: number;
}

/** How one child process went. */
interface Timed {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** From spawn to exit, in milliseconds. */
  readonly wallMs: number;
  /**
   * From the arrival of its last output to its exit, in milliseconds; 0
   * when the exit was seen first (both within one turn of the event loop).
   */
  readonly exitAfterWriteMs: number;
}

function timed(file: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<Timed> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    let lastWrite = NaN;
    let exitAt = NaN;
    let code: number | null = null;
    const started = performance.now();
    const child = spawn(file, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      lastWrite = performance.now();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      lastWrite = performance.now();
    });
    child.once('error', reject);
    // The exit is timed when the process ends; its output is complete only
    // once both pipes have closed, which may come later.
    child.once('exit', (c) => {
      exitAt = performance.now();
      code = c;
    });
    child.once('close', () => {
      resolve({
        code,
        stdout,
        stderr,
        wallMs: exitAt - started,
        exitAfterWriteMs: Number.isNaN(lastWrite) ? NaN : Math.max(0, exitAt - lastWrite),
      });
    });
  });
}

function exchange(
  agent: http.Agent,
  method: 'GET' | 'POST',
  url: string,
  headers: Record<string, string>,
  body?: string,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, agent }, (res) => {
      res.resume();
      res.once('end', () => {
        resolve(res.statusCode ?? 0);
      });
      res.once('error', reject);
    });
    req.once('error', reject);
    req.end(body);
  });
}

/**
 * The HTTP exchanges of one transfer, from this process, on one fresh
 * keep-alive connection as the client makes them.
 *
 * @returns their wall time in milliseconds
 * @throws Error when the server does not answer 200 and then 201
 */
async function exchanges(o: ClientOptions, from: string, to: string): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const auth = { authorization: `Bearer ${o.token}` };
  const body = JSON.stringify({ from_account_id: from, to_account_id: to, amount: 1 });
  try {
    const started = performance.now();
    const me = await exchange(agent, 'GET', `${o.base}/api/v1/me`, auth);
    const created = await exchange(
      agent,
      'POST',
      `${o.base}/api/v1/transfers`,
      {
        ...auth,
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
        'idempotency-key': newId(),
      },
      body,
    );
    const ms = performance.now() - started;
    if (me !== 200 || created !== 201) {
      throw new Error(`the bench's own exchanges answered ${String(me)} and ${String(created)}`);
    }
    return ms;
  } finally {
    agent.destroy();
  }
}

async function transfer(o: ClientOptions, from: string, to: string): Promise<Timed> {
  const env = {
    PATH: process.env['PATH'] ?? '/usr/bin:/bin',
    HOME: process.env['HOME'] ?? '/tmp',
    CLIENT_BASE_URL: o.base,
    CLIENT_TOKEN: o.token,
    CLIENT_OUTBOX: o.outbox,
  };
  const run = await timed(
    process.execPath,
    [o.main, 'transfer', '--from', from, '--to', to, '--amount', '1'],
    env,
  );
  if (run.code !== 0 || !/^transfer \S+: 201 created/.test(run.stdout)) {
    throw new Error(
      `client transfer exited ${String(run.code)}: ${run.stdout.trim()} ${run.stderr.trim()}`,
    );
  }
  return run;
}

function median(xs: readonly number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

function max(xs: readonly number[]): number {
  return xs.length === 0 ? NaN : Math.max(...xs);
}

/**
 * Runs the client scenario: one unmeasured round (it creates the outbox,
 * binds it to the principal, and warms the server's path), then `runs`
 * rounds of `node -e 0`, the bench's own exchanges and `client transfer`.
 *
 * @param o where the server and the built client are, and how many runs
 * @returns the medians, the maxima and the overhead of each round
 * @throws Error when a transfer does not end 201 with exit 0, or the
 *   bench's own exchanges are refused
 */
export async function runClient(o: ClientOptions): Promise<ClientFigures> {
  const bare = { PATH: process.env['PATH'] ?? '/usr/bin:/bin' };
  const pair = (i: number): [string, string] => [
    o.accounts[i % o.accounts.length]!,
    o.accounts[(i + 1) % o.accounts.length]!,
  ];
  await timed(process.execPath, ['-e', '0'], bare);
  await exchanges(o, ...pair(0));
  await transfer(o, ...pair(0));
  const nodeMs: number[] = [];
  const httpMs: number[] = [];
  const transferMs: number[] = [];
  const overheadMs: number[] = [];
  const exitMs: number[] = [];
  for (let i = 1; i <= o.runs; i++) {
    const node = await timed(process.execPath, ['-e', '0'], bare);
    const http = await exchanges(o, ...pair(i));
    const client = await transfer(o, ...pair(i));
    nodeMs.push(node.wallMs);
    httpMs.push(http);
    transferMs.push(client.wallMs);
    overheadMs.push(client.wallMs - node.wallMs - http);
    exitMs.push(client.exitAfterWriteMs);
  }
  return {
    runs: o.runs,
    nodeMedianMs: median(nodeMs),
    httpMedianMs: median(httpMs),
    transferMedianMs: median(transferMs),
    transferMaxMs: max(transferMs),
    overheadMedianMs: median(overheadMs),
    overheadMaxMs: max(overheadMs),
    exitAfterWriteMedianMs: median(exitMs),
    exitAfterWriteMaxMs: max(exitMs),
  };
}

/**
 * Where the built client's entry point is, under the project's root.
 *
 * @param root the project's root
 * @returns the path of dist/apps/client/main.js
 */
export function builtClient(root: string): string {
  return path.join(root, 'dist', 'apps', 'client', 'main.js');
}
