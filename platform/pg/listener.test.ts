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

/** A server that accepts connections and then never answers, or closes them at once. */
async function badServer(t: Tap.Test, behaviour: 'silent' | 'closes'): Promise<string> {
  const sockets: net.Socket[] = [];
  const server = net.createServer((socket) => {
    if (behaviour === 'closes') socket.destroy();
    else sockets.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => {
          resolve();
        });
      }),
  );
  return `postgres://u:p@127.0.0.1:${String((server.address() as net.AddressInfo).port)}/d`;
}

void t.test(
  'a server that never answers: start returns within its bound, and close at once',
  async (t) => {
    const url = await badServer(t, 'silent');
    const errors: unknown[] = [];
    const listener = new PgListener(url, {
      channel: 'test_channel',
      applicationName: 'listener-silent',
      onNotify: () => undefined,
      onState: () => undefined,
      onError: (err) => errors.push(err),
    });
    const started = performance.now();
    await listener.start();
    const startMs = performance.now() - started;
    t.ok(startMs < 2_500, `start returned after ${startMs.toFixed(0)} ms`);
    t.equal(listener.listening, false);
    await listener.close();

    const other = new PgListener(url, {
      channel: 'test_channel',
      applicationName: 'listener-silent',
      onNotify: () => undefined,
      onState: () => undefined,
      onError: () => undefined,
    });
    const starting = other.start();
    await new Promise((r) => setTimeout(r, 200));
    const closing = performance.now();
    await other.close();
    const closeMs = performance.now() - closing;
    t.ok(closeMs < 1_500, `close during an attempt returned after ${closeMs.toFixed(0)} ms`);
    await starting;
  },
);

void t.test('a server that never answers: the attempt times out after 5 s', async (t) => {
  const url = await badServer(t, 'silent');
  const errors: { err: unknown; ms: number }[] = [];
  const began = performance.now();
  const listener = new PgListener(url, {
    channel: 'test_channel',
    applicationName: 'listener-timeout',
    onNotify: () => undefined,
    onState: () => undefined,
    onError: (err) => errors.push({ err, ms: performance.now() - began }),
  });
  t.teardown(() => listener.close());
  await listener.start();
  await until('the connect timeout', () => errors.length >= 1, 8_000);
  const first = errors[0]!;
  t.match(String(first.err), /CONNECT_TIMEOUT|timeout/i);
  t.ok(first.ms >= 4_500 && first.ms < 7_000, `timed out after ${first.ms.toFixed(0)} ms`);
});

void t.test('a server that closes every connection: start returns within its bound', async (t) => {
  const url = await badServer(t, 'closes');
  const listener = new PgListener(url, {
    channel: 'test_channel',
    applicationName: 'listener-closes',
    onNotify: () => undefined,
    onState: () => undefined,
    onError: () => undefined,
    maxRetryMs: 20,
  });
  t.teardown(() => listener.close());
  const started = performance.now();
  await listener.start();
  const startMs = performance.now() - started;
  t.ok(startMs < 2_500, `start returned after ${startMs.toFixed(0)} ms`);
  t.equal(listener.listening, false);
});

void t.test('a session killed right after each LISTEN backs off instead of looping', async (t) => {
  const tdb = await testDatabase(t);
  const admin = createSql(tdb.adminUrl, { max: 1, applicationName: 'listener-test-admin' });
  t.teardown(() => admin.end());
  const changes: { live: boolean; at: number }[] = [];
  const kill = () =>
    admin`select pg_terminate_backend(pid) from pg_stat_activity
           where application_name = 'listener-flapping'`.catch(() => undefined);
  const listener = new PgListener(tdb.appUrl, {
    channel: 'test_channel',
    applicationName: 'listener-flapping',
    onNotify: () => undefined,
    onState: (live) => {
      changes.push({ live, at: performance.now() });
      if (live && changes.filter((c) => c.live).length <= 5) void kill();
    },
    maxRetryMs: 400,
  });
  t.teardown(() => listener.close());
  await listener.start();
  await until('six sessions', () => changes.filter((c) => c.live).length >= 6, 10_000);
  const gaps: number[] = [];
  for (let i = 1; i < changes.length; i += 1) {
    const prev = changes[i - 1]!;
    const cur = changes[i]!;
    if (!prev.live && cur.live) gaps.push(cur.at - prev.at);
  }
  t.comment(`waits before listening again: ${gaps.map((g) => g.toFixed(0)).join(', ')} ms`);
  t.ok(
    gaps.slice(3).every((g) => g >= 180),
    'from the fourth loss on, it waits at least half the longest wait',
  );
});

void t.test('callbacks that throw', async (t) => {
  const tdb = await testDatabase(t);
  const rejections: unknown[] = [];
  const onRejection = (err: unknown) => rejections.push(err);
  process.on('unhandledRejection', onRejection);
  t.teardown(() => {
    process.off('unhandledRejection', onRejection);
  });
  const states: boolean[] = [];
  const payloads: string[] = [];
  const listener = new PgListener(tdb.appUrl, {
    channel: 'test_channel',
    applicationName: 'listener-throws',
    onNotify: (p) => {
      payloads.push(p);
      if (p === 'bad') throw new Error('onNotify failed');
    },
    onState: (s) => {
      states.push(s);
      throw new Error('onState failed');
    },
    onError: () => {
      throw new Error('onError failed');
    },
  });
  t.teardown(() => listener.close());
  await listener.start();
  t.equal(listener.listening, true, 'a throwing onState does not stop it');
  await tdb.owner`select pg_notify('test_channel', 'bad')`;
  await until('not live after onNotify threw', () => states.includes(false));
  await until('live again', () => listener.listening);
  t.same(states, [true, false, true], 'a notice not handled marks the feed not live for a while');
  await tdb.owner`select pg_notify('test_channel', 'good')`;
  await until('the next notice', () => payloads.length === 2);
  await new Promise((r) => setTimeout(r, 50));
  t.same(rejections, [], 'no unhandled rejection');
});
