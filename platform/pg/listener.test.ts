import net from 'node:net';
import t from 'tap';
import type * as Tap from 'tap';
import { testDatabase } from '../../test/harness/db.js';
import { createSql } from './client.js';
import { PgListener } from './listener.js';

async function until(what: string, check: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

void t.test('a channel that is not a plain identifier is refused', (t) => {
  for (const channel of ['', 'Upper', 'a-b', 'x"; drop table y; --', 'a'.repeat(64)]) {
    t.throws(
      () =>
        new PgListener('postgres://u@127.0.0.1:1/d', {
          channel,
          applicationName: 'test',
          onNotify: () => undefined,
          onState: () => undefined,
        }),
      RangeError,
      JSON.stringify(channel),
    );
  }
  t.end();
});

void t.test(
  'notifications arrive; a lost session is reported at once and listening resumes',
  async (t) => {
    const tdb = await testDatabase(t);
    const payloads: string[] = [];
    const states: boolean[] = [];
    const listener = new PgListener(tdb.appUrl, {
      channel: 'test_channel',
      applicationName: 'listener-under-test',
      onNotify: (p) => payloads.push(p),
      onState: (s) => states.push(s),
    });
    t.teardown(() => listener.close());
    t.equal(listener.listening, false, 'not listening before start');
    await listener.start();
    t.equal(listener.listening, true);
    t.same(states, [true]);
    await tdb.owner`select pg_notify('test_channel', 'one'), pg_notify('other_channel', 'x')`;
    await until('the first notification', () => payloads.length === 1);
    t.same(payloads, ['one'], 'only its own channel');

    const admin = createSql(tdb.adminUrl, { max: 1, applicationName: 'listener-test-admin' });
    t.teardown(() => admin.end());
    const killed = await admin<{ ok: boolean }[]>`
      select pg_terminate_backend(pid) as ok from pg_stat_activity
       where application_name = 'listener-under-test'`;
    t.same(
      killed.map((k) => k.ok),
      [true],
      'one session, terminated',
    );
    await until('the loss', () => states.length >= 2);
    t.equal(states[1], false, 'the loss is reported');
    await until('listening again', () => listener.listening);
    t.same(states, [true, false, true]);
    await tdb.owner`select pg_notify('test_channel', 'two')`;
    await until('the notification after the reconnect', () => payloads.length === 2);
    t.same(payloads, ['one', 'two']);

    await listener.close();
    t.same(states, [true, false, true, false], 'closing reports the end');
    await tdb.owner`select pg_notify('test_channel', 'three')`;
    await new Promise((r) => setTimeout(r, 100));
    t.same(payloads, ['one', 'two'], 'nothing after close');
    const left = await tdb.owner<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where application_name = 'listener-under-test'`;
    t.equal(left[0]?.n, 0, 'the session is gone');
    await listener.close();
  },
);

void t.test(
  'a database that cannot be reached: start resolves, not listening, and it keeps trying',
  async (t) => {
    // A port that refuses: bound, then closed.
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => {
          resolve(p);
        });
      });
    });
    const errors: unknown[] = [];
    const states: boolean[] = [];
    const listener = new PgListener(`postgres://u:p@127.0.0.1:${String(port)}/d`, {
      channel: 'test_channel',
      applicationName: 'listener-unreachable',
      onNotify: () => undefined,
      onState: (s) => states.push(s),
      onError: (err) => errors.push(err),
      maxRetryMs: 20,
    });
    await listener.start();
    t.equal(listener.listening, false);
    t.same(states, [], 'never listening, so no state change');
    await until('a second attempt', () => errors.length >= 2);
    t.match(String(errors[0]), /ECONNREFUSED/);
    await listener.close();
    const after = errors.length;
    await new Promise((r) => setTimeout(r, 100));
    t.equal(errors.length, after, 'no attempt after close');
  },
);

/** A TCP relay to PostgreSQL whose forwarding can be paused (a silent partition). */
async function frozenRelay(t: Tap.Test, url: string) {
  const target = new URL(url);
  let frozen = false;
  const pairs: [net.Socket, net.Socket][] = [];
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    pairs.push([client, upstream]);
    const forward = (from: net.Socket, to: net.Socket) => {
      from.on('data', (chunk) => to.write(chunk));
      from.on('close', () => to.destroy());
      from.on('error', () => to.destroy());
    };
    forward(client, upstream);
    forward(upstream, client);
    if (frozen) {
      client.pause();
      upstream.pause();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        for (const [a, b] of pairs) {
          a.destroy();
          b.destroy();
        }
        server.close(() => {
          resolve();
        });
      }),
  );
  const relayed = new URL(url);
  relayed.hostname = '127.0.0.1';
  relayed.port = String((server.address() as net.AddressInfo).port);
  return {
    url: relayed.toString(),
    freeze: () => {
      frozen = true;
      for (const [a, b] of pairs) {
        a.pause();
        b.pause();
      }
    },
    thaw: () => {
      frozen = false;
      for (const [a, b] of pairs) {
        a.resume();
        b.resume();
      }
    },
  };
}

void t.test(
  'heartbeats: a session that hears nothing is reported not live, and live again when it hears',
  async (t) => {
    const tdb = await testDatabase(t);
    const relay = await frozenRelay(t, tdb.appUrl);
    const payloads: string[] = [];
    const states: boolean[] = [];
    const listener = new PgListener(relay.url, {
      channel: 'test_channel',
      applicationName: 'listener-heartbeat',
      onNotify: (p) => payloads.push(p),
      onState: (s) => states.push(s),
      heartbeat: { intervalMs: 100, timeoutMs: 300 },
    });
    t.teardown(() => listener.close());
    await listener.start();
    await until('live', () => listener.listening);
    await tdb.owner`select pg_notify('test_channel', 'one'), pg_notify('test_channel', 'hb:someone-else:7')`;
    await until('the notification', () => payloads.length === 1);
    await new Promise((r) => setTimeout(r, 300));
    t.same(payloads, ['one'], 'heartbeats, its own and others, are not passed on');
    t.same(states, [true], 'live while its heartbeats come back');

    relay.freeze();
    const frozenAt = performance.now();
    await until('not live', () => !listener.listening, 3_000);
    const lostMs = performance.now() - frozenAt;
    t.ok(lostMs < 1_000, `reported not live ${lostMs.toFixed(0)} ms after the freeze`);
    t.same(states, [true, false]);
    await tdb.owner`select pg_notify('test_channel', 'two')`;

    relay.thaw();
    await until('live again', () => listener.listening, 3_000);
    t.same(states, [true, false, true], 'live again once a heartbeat is heard');
    await until('the notification sent while frozen', () => payloads.length === 2);
    t.same(payloads, ['one', 'two']);
  },
);

void t.test('a heartbeat that cannot be sent counts as not heard', async (t) => {
  const tdb = await testDatabase(t);
  const states: boolean[] = [];
  let failing = false;
  const listener = new PgListener(tdb.appUrl, {
    channel: 'test_channel',
    applicationName: 'listener-heartbeat-send',
    onNotify: () => undefined,
    onState: (s) => states.push(s),
    heartbeat: {
      intervalMs: 50,
      timeoutMs: 5_000,
      send: async (channel, payload) => {
        if (failing) throw new Error('the pool is down');
        await tdb.owner`select pg_notify(${channel}, ${payload})`;
      },
    },
  });
  t.teardown(() => listener.close());
  await listener.start();
  await until('live', () => listener.listening);
  failing = true;
  await until('not live', () => !listener.listening, 1_000);
  failing = false;
  await until('live again', () => listener.listening, 1_000);
  t.same(states, [true, false, true]);
});
