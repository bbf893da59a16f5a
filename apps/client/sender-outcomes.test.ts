/**
 * Every status class, marked and unmarked, after an attempt that may have
 * reached the server and after none, against a real HTTP server (node:http
 * on 127.0.0.1) that gives the same answer to every attempt: once an attempt
 * may have reached the server, no answer but a marked final one may end the
 * intent as anything other than `outcome_unknown` (a person reading FAILED
 * for a transfer that moved states it again, and the money moves twice).
 */
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { EXIT } from './cli.js';
import { resultLine } from './cli-output.js';
import { Outbox, type FailureReason } from './outbox.js';
import { Sender } from './sender.js';

const START = Date.parse('2026-06-01T10:00:00Z');

/** How the intent's earlier attempts went before the scripted answers. */
type History =
  /** No attempt before: the scripted answer meets the first one. */
  | 'none'
  /** A process died during an attempt (counted, never ended). */
  | 'crash'
  /** The first attempt of this drain loses its connection before the answer. */
  | 'lost'
  /**
   * A version 1 outbox's attempt cut off: the migration keeps its start
   * (`attempt_started_at`) with no attempt counted.
   */
  | 'migrated';

/** Where the intent ends. */
type End =
  | { readonly state: 'done' }
  | { readonly state: 'failed'; readonly failure: FailureReason }
  /** Still pending, for the stop reason given (repeated until the deadline, or a 401). */
  | { readonly state: 'pending'; readonly stoppedBy: 'deadline' | 'unauthenticated' };

interface Row {
  readonly status: number;
  readonly code: string;
  readonly marked: boolean;
  /** The end after no earlier attempt. */
  readonly none: End;
  /** The end after an earlier attempt that may have reached the server. */
  readonly reached: End;
}

const DONE: End = { state: 'done' };
const UNKNOWN: End = { state: 'failed', failure: 'outcome_unknown' };
const UNEXPECTED: End = { state: 'failed', failure: 'unexpected_answer' };
const REUSE: End = { state: 'failed', failure: 'key_reuse' };
const REPEATED: End = { state: 'pending', stoppedBy: 'deadline' };
const HALTED: End = { state: 'pending', stoppedBy: 'unauthenticated' };

const rows: Row[] = [];
const add = (status: number, code: string, marked: End[], unmarked: End[]): void => {
  const [mNone = DONE, mReached = mNone] = marked;
  const [uNone = DONE, uReached = uNone] = unmarked;
  rows.push({ status, code, marked: true, none: mNone, reached: mReached });
  rows.push({ status, code, marked: false, none: uNone, reached: uReached });
};
// 2xx and the statuses the server stores: final when marked; unmarked, not
// the key's answer, repeated once, and a second unmarked one is unknown.
for (const s of [200, 201, 204]) add(s, 'ok', [DONE], [UNKNOWN]);
for (const [s, code] of [
  [400, 'validation_failed'],
  [403, 'forbidden'],
  [404, 'not_found'],
  [409, 'conflict'],
  [410, 'gone'],
  [412, 'precondition_failed'],
  [413, 'payload_too_large'],
  [415, 'unsupported_media_type'],
  [422, 'unprocessable'],
] as const) {
  add(s, code, [DONE], [UNKNOWN]);
}
// Answers the API never gives to a keyed write: a caller's or a gateway's
// affair when nothing was sent before, unknown once something may have been.
for (const [s, code] of [
  [301, 'moved'],
  [304, 'not_modified'],
  [307, 'redirect'],
  [405, 'method_not_allowed'],
  [406, 'not_acceptable'],
  [428, 'precondition_required'],
  [431, 'headers_too_large'],
  [451, 'unavailable'],
] as const) {
  add(s, code, [UNEXPECTED, UNKNOWN], [UNEXPECTED, UNKNOWN]);
}
// Not stored: repeated with the same key until the deadline.
for (const [s, code] of [
  [408, 'request_timeout'],
  [409, 'request_in_progress'],
  [429, 'rate_limited'],
  [500, 'internal_error'],
  [502, 'bad_gateway'],
  [503, 'service_unavailable'],
  [504, 'gateway_timeout'],
] as const) {
  add(s, code, [REPEATED], [REPEATED]);
}
add(401, 'unauthenticated', [HALTED], [HALTED]);
add(422, 'idempotency_key_reuse', [REUSE], [REUSE]);

/** A server that answers GET /api/v1/me with a principal and every POST from `answer`. */
async function server(t: Test, answer: (res: http.ServerResponse, n: number) => void) {
  let posts = 0;
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/api/v1/me') {
        res.sendDate = false;
        res.writeHead(200, {
          'content-type': 'application/json; charset=utf-8',
          // The server's time, so an intent attempted before may be sent.
          date: new Date(START).toUTCString(),
        });
        res.end('{"id":"p1","kind":"user","display_name":"P"}');
        return;
      }
      res.sendDate = false;
      posts += 1;
      answer(res, posts);
    });
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  t.teardown(() => {
    srv.closeAllConnections();
    srv.close();
  });
  const { port } = srv.address() as AddressInfo;
  return { base: `http://127.0.0.1:${String(port)}`, posts: () => posts };
}

async function runRow(t: Test, row: Row, history: History): Promise<void> {
  const expected = history === 'none' ? row.none : row.reached;
  const srv = await server(t, (res, n) => {
    if (history === 'lost' && n === 1) {
      res.socket?.destroy();
      return;
    }
    res.writeHead(row.status, {
      'content-type':
        row.status >= 400
          ? 'application/problem+json; charset=utf-8'
          : 'application/json; charset=utf-8',
      ...(row.marked ? { 'idempotent-replay': n % 2 === 0 ? 'true' : 'false' } : {}),
    });
    res.end(JSON.stringify({ code: row.code, detail: `a ${String(row.status)}` }));
  });
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-outcomes-'));
  const clock = { now: START };
  const file = path.join(dir, 'outbox.sqlite');
  let outbox = Outbox.open(file, { clock: () => clock.now });
  t.teardown(async () => {
    outbox.close();
    await fs.rm(dir, { recursive: true, force: true });
  });
  const { intent } = outbox.enqueue({
    operation: 'createTransfer',
    method: 'POST',
    path: '/api/v1/transfers',
    body: { from_account_id: 'a', to_account_id: 'b', amount: 1 },
  });
  if (history === 'crash') outbox.recordAttempt(intent.seq, 1, START);
  if (history === 'migrated') {
    outbox.close();
    const db = new DatabaseSync(file);
    db.prepare('update intents set attempt_started_at = ? where seq = ?').run(START, intent.seq);
    db.close();
    outbox = Outbox.open(file, { clock: () => clock.now });
  }
  const sender = new Sender({
    outbox,
    baseUrl: srv.base,
    token: 'tok',
    keyTtlMs: 24 * 3_600_000,
    ttlMarginMs: 3_600_000,
    timeoutMs: 2_000,
    concurrency: 1,
    backoff: { baseMs: 100, capMs: 1_000, maxRetryAfterMs: 1_000 },
    clock: () => clock.now,
    random: () => 0.5,
    sleep: async (ms) => {
      clock.now += ms;
      await Promise.resolve();
    },
  });
  const report = await sender.drain({ deadline: START + 1_000 });
  const got = outbox.get(intent.key);
  if (got === undefined) throw new Error('the intent is gone');
  t.equal(got.state, expected.state, 'state');
  if (expected.state === 'failed') t.equal(got.failure, expected.failure, 'failure');
  if (expected.state === 'pending') t.equal(report.stoppedBy, expected.stoppedBy, 'stopped by');
  if (expected.state === 'done') t.equal(got.answer?.status, row.status, 'the answer is kept');
  if (got.failure === 'outcome_unknown') {
    // The wording of an unknown outcome: it may have taken effect, do not
    // state it again, how to check; exit 3 like every failed intent.
    const line = resultLine(got, false);
    t.match(line, /FAILED: outcome unknown: /, line);
    t.match(line, /may have taken effect/);
    t.match(line, /check the balances of both accounts/);
    t.match(line, /before stating it again as a new intent; not sent again$/);
    t.equal(EXIT.failed, 3);
  }
  if (expected.state !== 'pending') {
    t.equal(outbox.list().length, 1, 'no new intent, no new key');
  }
}

for (const history of ['none', 'crash', 'lost', 'migrated'] as const) {
  void t.test(
    `after ${history === 'none' ? 'no attempt' : history === 'migrated' ? 'a version 1 attempt cut off, none counted' : `an attempt ${history === 'crash' ? 'cut off by a crash' : 'whose connection was lost'}`}`,
    async (t) => {
      for (const row of rows) {
        await t.test(
          `${row.marked ? 'marked' : 'unmarked'} ${String(row.status)} ${row.code}`,
          (t) => runRow(t, row, history),
        );
      }
    },
  );
}
