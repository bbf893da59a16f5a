/**
 * The sender learns how long the server keeps a key from the
 * `Idempotency-Key-Lifetime` header (of `GET /api/v1/me`, asked before the
 * first send, and of every answer), against a real HTTP server on
 * 127.0.0.1; `keyTtlMs` is an override that never lets a key live longer
 * than the server says, and a disagreement is reported as a warning.
 */
import { once } from 'node:events';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { Outbox } from './outbox.js';
import { Sender } from './sender.js';

const H = 3_600_000;
const START = Date.parse('2026-06-01T10:00:00Z');

async function setup(t: Test, lifetime: string | undefined, keyTtlMs?: number) {
  const posts: string[] = [];
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.sendDate = false;
      const headers: Record<string, string> = {
        'content-type': 'application/json; charset=utf-8',
        date: new Date(clock.now).toUTCString(),
        ...(lifetime === undefined ? {} : { 'idempotency-key-lifetime': lifetime }),
      };
      if (req.url === '/api/v1/me') {
        res.writeHead(200, headers);
        res.end('{"id":"p1","kind":"user","display_name":"P"}');
        return;
      }
      posts.push(String(req.headers['idempotency-key']));
      res.writeHead(201, { ...headers, 'idempotent-replay': 'false' });
      res.end('{"id":"t1"}');
    });
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  t.teardown(() => {
    srv.closeAllConnections();
    srv.close();
  });
  const { port } = srv.address() as AddressInfo;
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-lifetime-'));
  const clock = { now: START };
  const outbox = Outbox.open(path.join(dir, 'outbox.sqlite'), { clock: () => clock.now });
  t.teardown(async () => {
    outbox.close();
    await fs.rm(dir, { recursive: true, force: true });
  });
  const warnings: string[] = [];
  const sender = new Sender({
    outbox,
    baseUrl: `http://127.0.0.1:${String(port)}`,
    token: 'tok',
    ...(keyTtlMs === undefined ? {} : { keyTtlMs }),
    ttlMarginMs: H,
    timeoutMs: 2_000,
    concurrency: 1,
    backoff: { baseMs: 100, capMs: 1_000, maxRetryAfterMs: 1_000 },
    clock: () => clock.now,
    random: () => 0.5,
    sleep: async (ms) => {
      clock.now += ms;
      await Promise.resolve();
    },
    onWarning: (w) => warnings.push(w),
  });
  // Stated 90 minutes ago, never sent: young for 24 hours, too old for 2.
  const { intent } = outbox.enqueue({ operation: 'op', method: 'POST', path: '/x', body: {} });
  clock.now += 90 * 60_000;
  return { outbox, sender, warnings, posts, intent };
}

void t.test(
  'the lifetime told by GET /api/v1/me expires a key before its first send',
  async (t) => {
    const s = await setup(t, '7200');
    await s.sender.drain();
    t.same(s.posts, [], 'not sent: the server keeps keys 2 hours, less the 1 hour margin');
    t.match(s.outbox.get(s.intent.key), { state: 'failed', failure: 'expired' });
    t.equal(s.sender.keyLifetimeMs(), 2 * H, 'the lifetime in force');
    t.notOk(s.warnings.length > 0, 'no warning without an override');
  },
);

void t.test(
  'an override longer than the server says is not believed, and is warned of',
  async (t) => {
    const s = await setup(t, '7200', 24 * H);
    await s.sender.drain();
    t.same(s.posts, [], 'the shorter lifetime, the server one, is in force');
    t.match(s.outbox.get(s.intent.key), { state: 'failed', failure: 'expired' });
    t.equal(s.warnings.length, 1, 'warned once');
    t.match(
      s.warnings[0],
      /key TTL 1d given .*server keeps keys for, 2h .*the shorter, 2h, is used/,
    );
  },
);

void t.test('an override shorter than the server says is kept, and is warned of', async (t) => {
  const s = await setup(t, String(48 * 3600), 2 * H);
  await s.sender.drain();
  t.same(s.posts, [], 'the override, 2 hours, is in force');
  t.equal(s.sender.keyLifetimeMs(), 2 * H);
  t.equal(s.warnings.length, 1);
});

void t.test(
  'an override equal to the server is quiet; a server that says nothing keeps 24h',
  async (t) => {
    const equal = await setup(t, '86400', 24 * H);
    await equal.sender.drain();
    t.equal(equal.posts.length, 1, 'sent');
    t.same(equal.warnings, []);
    const silent = await setup(t, undefined);
    await silent.sender.drain();
    t.equal(silent.posts.length, 1, 'sent: 90 minutes is young for the default 24 hours');
    t.equal(silent.sender.keyLifetimeMs(), 24 * H);
    const odd = await setup(t, 'soon');
    await odd.sender.drain();
    t.equal(odd.posts.length, 1, 'an unreadable value is no lifetime');
    t.equal(odd.sender.keyLifetimeMs(), 24 * H);
  },
);

void t.test(
  'a lifetime not above the margin is warned of, and the drain halts with every intent kept pending',
  async (t) => {
    // One short header (a gateway's, a misconfigured server's) must not fail
    // for good intents the real server could still deliver or replay.
    const s = await setup(t, '3600');
    const report = await s.sender.drain();
    t.same(s.posts, []);
    t.equal(s.warnings.length, 1);
    t.match(
      s.warnings[0],
      /keeps keys for 1h .*not longer than the TTL margin 1h .*nothing is sent/,
    );
    t.equal(report.stoppedBy, 'key_lifetime_too_short', 'halted for a person to fix');
    t.match(
      report.halt,
      /lifetime in force, 3600s .*not longer than --ttl-margin 3600s: nothing was sent/,
    );
    t.match(s.outbox.get(s.intent.key), { state: 'pending', failure: null }, 'kept pending');
    t.same(report.settled, [], 'nothing settled');
  },
);

void t.test(
  'a lifetime told longer after an intent was first sent is not believed for it: its key may have been kept for the shorter one',
  async (t) => {
    // The server keeps keys 24 hours when the first attempt goes out (and
    // fails with a 503), then an operator raises it to 48 hours: the key's
    // row, if any, still expires 24 hours after its first sight.
    let lifetime = String(24 * 3600);
    let failing = true;
    const posts: string[] = [];
    const clock = { now: START };
    const srv = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.sendDate = false;
        const headers = {
          'content-type': 'application/json; charset=utf-8',
          date: new Date(clock.now).toUTCString(),
          'idempotency-key-lifetime': lifetime,
        };
        if (req.url === '/api/v1/me') {
          res.writeHead(200, headers);
          res.end('{"id":"p1","kind":"user","display_name":"P"}');
          return;
        }
        posts.push(String(req.headers['idempotency-key']));
        if (failing) {
          res.writeHead(503, { ...headers, 'content-type': 'application/problem+json' });
          res.end('{"code":"service_unavailable","status":503,"detail":"try later"}');
          return;
        }
        res.writeHead(201, { ...headers, 'idempotent-replay': 'false' });
        res.end('{"id":"t1"}');
      });
    });
    srv.listen(0, '127.0.0.1');
    await once(srv, 'listening');
    t.teardown(() => {
      srv.closeAllConnections();
      srv.close();
    });
    const { port } = srv.address() as AddressInfo;
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-lifetime-'));
    const file = path.join(dir, 'outbox.sqlite');
    t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
    const run = async (deadline: number) => {
      // Each drain in a process of its own: a new sender on the same file.
      const outbox = Outbox.open(file, { clock: () => clock.now });
      try {
        const sender = new Sender({
          outbox,
          baseUrl: `http://127.0.0.1:${String(port)}`,
          token: 'tok',
          ttlMarginMs: H,
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
        await sender.drain({ deadline });
        return outbox.list().map((i) => ({ state: i.state, failure: i.failure }));
      } finally {
        outbox.close();
      }
    };
    const first = Outbox.open(file, { clock: () => clock.now });
    const { intent } = first.enqueue({ operation: 'op', method: 'POST', path: '/x', body: {} });
    first.close();
    t.same(await run(clock.now + 1), [{ state: 'pending', failure: null }], 'sent once, 503');
    t.equal(posts.length, 1);
    lifetime = String(48 * 3600);
    failing = false;
    clock.now += 30 * H;
    const later = await run(clock.now + 60_000);
    t.same(posts, [intent.key], 'never sent again: 30 hours is past the 24 it was sent under');
    t.same(later, [{ state: 'failed', failure: 'expired' }]);
  },
);

void t.test(
  'a lifetime too short to send under, seen while an attempted intent is held, is kept for it: a later longer one is not believed',
  async (t) => {
    // The server keeps keys 24 hours when the first attempt goes out (and
    // fails with a 503), then an operator raises it to 48 hours: the key's
    // row, if any, still expires 24 hours after its first sight.
    let lifetime = String(24 * 3600);
    let failing = true;
    const posts: string[] = [];
    const clock = { now: START };
    const srv = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.sendDate = false;
        const headers = {
          'content-type': 'application/json; charset=utf-8',
          date: new Date(clock.now).toUTCString(),
          'idempotency-key-lifetime': lifetime,
        };
        if (req.url === '/api/v1/me') {
          res.writeHead(200, headers);
          res.end('{"id":"p1","kind":"user","display_name":"P"}');
          return;
        }
        posts.push(String(req.headers['idempotency-key']));
        if (failing) {
          res.writeHead(503, { ...headers, 'content-type': 'application/problem+json' });
          res.end('{"code":"service_unavailable","status":503,"detail":"try later"}');
          return;
        }
        res.writeHead(201, { ...headers, 'idempotent-replay': 'false' });
        res.end('{"id":"t1"}');
      });
    });
    srv.listen(0, '127.0.0.1');
    await once(srv, 'listening');
    t.teardown(() => {
      srv.closeAllConnections();
      srv.close();
    });
    const { port } = srv.address() as AddressInfo;
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-lifetime-'));
    const file = path.join(dir, 'outbox.sqlite');
    t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
    const run = async (deadline: number) => {
      // Each drain in a process of its own: a new sender on the same file.
      const outbox = Outbox.open(file, { clock: () => clock.now });
      try {
        const sender = new Sender({
          outbox,
          baseUrl: `http://127.0.0.1:${String(port)}`,
          token: 'tok',
          ttlMarginMs: H,
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
        await sender.drain({ deadline });
        return outbox.list().map((i) => ({ state: i.state, failure: i.failure }));
      } finally {
        outbox.close();
      }
    };
    const first = Outbox.open(file, { clock: () => clock.now });
    const { intent } = first.enqueue({ operation: 'op', method: 'POST', path: '/x', body: {} });
    first.close();
    t.same(await run(clock.now + 1), [{ state: 'pending', failure: null }], 'sent once, 503');
    t.equal(posts.length, 1);
    // A short lifetime now: the drain holds the intent, sends nothing, and
    // the intent keeps that lifetime, since the server may have purged
    // its key by it.
    lifetime = '3600';
    clock.now += 60_000;
    t.same(await run(clock.now + 1), [{ state: 'pending', failure: null }], 'held, not failed');
    t.equal(posts.length, 1, 'not sent while held');
    lifetime = String(24 * 3600);
    failing = false;
    clock.now += 2 * H;
    const later = await run(clock.now + 60_000);
    t.same(posts, [intent.key], 'never sent again: its key may be gone after 1 hour');
    t.same(later, [{ state: 'failed', failure: 'expired' }]);
  },
);
