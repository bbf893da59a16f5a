/**
 * What the sender's tests share (sender.test.ts, sender-answers.test.ts,
 * sender-clock.test.ts): a real HTTP server whose answers each test scripts
 * (node:http on 127.0.0.1, port 0), answers shaped as the server and a
 * gateway give them, and a sender on a fresh outbox with a manual clock and
 * a sleep that advances it, so backoff and Retry-After are observed without
 * waiting. It is no part of the library (index.ts does not export it); it
 * lives beside the tests because they need nothing beyond apps/client, and
 * it imports only the test runner's types, which compiling erases, so dist/
 * never loads the test runner.
 */
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Test } from 'tap';
import { Outbox, type NewIntent } from './outbox.js';
import { Sender, type SendEvent, type SenderOptions } from './sender.js';

/** A request as the scripted server received it. */
export interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

/** One scripted answer: writes the response to the request `seen`. */
export type Reply = (res: http.ServerResponse, seen: Seen) => void | Promise<void>;

/** A scripted server: where it listens and what it has received. */
export interface Scripted {
  /** Its origin, `http://127.0.0.1:<port>`. */
  readonly base: string;
  /** Every request but `GET /api/v1/me`, in the order received. */
  readonly seen: Seen[];
  /** The answers still to give, in order; a 500 once it is empty. */
  readonly script: Reply[];
  readonly server: http.Server;
}

/**
 * A server answering POSTs from a script, GET /api/v1/me with a principal.
 *
 * @param t the test whose teardown closes the server
 * @param me the answer to every `GET /api/v1/me`
 * @returns the listening server, its script and what it received
 */
export async function scripted(
  t: Test,
  me: Reply = json(200, { id: 'p1', kind: 'user', display_name: 'P' }),
): Promise<Scripted> {
  const seen: Seen[] = [];
  const script: Reply[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      // The tests' clock is not the machine's: a Date header only where a test sets one.
      res.sendDate = false;
      const s = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body };
      if (req.url === '/api/v1/me') {
        void me(res, s);
        return;
      }
      seen.push(s);
      const next = script.shift() ?? json(500, { code: 'internal_error' });
      void next(res, s);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  return { base: `http://127.0.0.1:${String(port)}`, seen, script, server };
}

/** The statuses the server stores under a key, and marks with Idempotent-Replay. */
const MARKED = new Set([200, 201, 204, 400, 403, 404, 409, 410, 412, 413, 415, 422]);

/**
 * An answer as the server gives it: a 2xx or stored status carries
 * `Idempotent-Replay: false` unless the headers say otherwise (the server
 * marks every answer it stores); see {@link unmarked} for one without.
 *
 * @param status the status code
 * @param body the JSON body
 * @param headers headers added last, so they win
 * @param mark whether to send `Idempotent-Replay: false`
 * @returns the scripted answer
 */
export function json(
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
  mark = MARKED.has(status),
): (res: http.ServerResponse, seen?: Seen) => void {
  return (res) => {
    const problem = status >= 400;
    res.writeHead(status, {
      'content-type': problem
        ? 'application/problem+json; charset=utf-8'
        : 'application/json; charset=utf-8',
      ...(mark ? { 'idempotent-replay': 'false' } : {}),
      ...headers,
    });
    res.end(JSON.stringify(body));
  };
}

/**
 * An answer without `Idempotent-Replay`: a gateway's, not the key's.
 *
 * @param status the status code
 * @param body the JSON body
 * @returns the scripted answer
 */
export function unmarked(
  status: number,
  body: unknown,
): (res: http.ServerResponse, seen?: Seen) => void {
  return json(status, body, {}, false);
}

async function outboxIn(t: Test, clock: () => number): Promise<Outbox> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-sender-'));
  const outbox = Outbox.open(path.join(dir, 'outbox.sqlite'), { clock });
  t.teardown(async () => {
    outbox.close();
    await fs.rm(dir, { recursive: true, force: true });
  });
  return outbox;
}

/** Where every test's manual clock starts. */
export const START = Date.parse('2026-06-01T10:00:00Z');

/** A sender on a scripted server and a fresh outbox, with what it did. */
export interface Setup extends Scripted {
  /** The manual clock the outbox and the sender read; a sleep advances it. */
  readonly clock: { now: number };
  readonly outbox: Outbox;
  /** Every event of the sender, in order. */
  readonly events: SendEvent[];
  /** Every sleep the sender asked for, in milliseconds. */
  readonly sleeps: number[];
  readonly sender: Sender;
}

/**
 * A sender on a scripted server and a fresh outbox: a 24 hour key lifetime
 * less a 1 hour margin, a 2 second timeout, jitter at random 0.5.
 *
 * @param t the test whose teardown closes the server and removes the outbox
 * @param me the answer to every `GET /api/v1/me`
 * @param extra options that replace the defaults
 * @returns the sender, its server, outbox and clock, and what it did
 */
export async function setup(
  t: Test,
  me?: Reply,
  extra: Partial<SenderOptions> = {},
): Promise<Setup> {
  const server = await scripted(t, me);
  const clock = { now: START };
  const outbox = await outboxIn(t, () => clock.now);
  const events: SendEvent[] = [];
  const sleeps: number[] = [];
  const sender = new Sender({
    outbox,
    baseUrl: server.base,
    token: 'tok',
    keyTtlMs: 24 * 3_600_000,
    ttlMarginMs: 3_600_000,
    timeoutMs: 2_000,
    concurrency: 4,
    backoff: { baseMs: 100, capMs: 10_000, maxRetryAfterMs: 60_000 },
    clock: () => clock.now,
    random: () => 0.5,
    sleep: async (ms) => {
      sleeps.push(ms);
      clock.now += ms;
      await Promise.resolve();
    },
    onEvent: (e) => events.push(e),
    ...extra,
  });
  return { ...server, clock, outbox, events, sleeps, sender };
}

/**
 * A transfer of `amount` from account a to account b, on the given lanes.
 *
 * @param amount the amount, also how a script tells intents apart
 * @param lanes the lanes it is sent in
 * @returns the intent to enqueue
 */
export const transfer = (amount: number, lanes = ['account:a', 'account:b']): NewIntent => ({
  operation: 'createTransfer',
  method: 'POST',
  path: '/api/v1/transfers',
  body: { from_account_id: 'a', to_account_id: 'b', amount },
  lanes,
});
