import { request } from 'node:http';
import { networkInterfaces } from 'node:os';
import t from 'tap';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import {
  fanOutMetrics,
  PrometheusMetrics,
  ScrapeTimeoutError,
  startMetricsListener,
  type Exposition,
} from './index.js';

/** The value of one sample line, by metric name and exact label text (`{a="b"}` or ``). */
function sample(body: string, name: string, labels = ''): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.slice(name.length + labels.length + 1));
}

void t.test('counters, gauges and histograms render in the text format', async (t) => {
  const metrics = new PrometheusMetrics();
  const jobs = metrics.counter('jobs_total', 'Jobs run.', ['task', 'outcome']);
  jobs.inc({ task: 'a', outcome: 'ok' });
  jobs.inc({ outcome: 'ok', task: 'a' }, 2.5);
  metrics.counter('starts_total', 'Starts.', []).inc();
  metrics.gauge('depth', 'Depth.', ['queue']).set({ queue: 'q' }, -3);
  const h = metrics.histogram('wait_seconds', 'Waits.', ['route'], [0.1, 1]);
  for (const v of [0.05, 0.5, 5]) h.observe({ route: 'r' }, v);
  const { contentType, body } = await metrics.exposition();
  t.equal(contentType, 'text/plain; version=0.0.4; charset=utf-8');
  t.match(body, '# HELP jobs_total Jobs run.\n# TYPE jobs_total counter\n');
  t.equal(sample(body, 'jobs_total', '{task="a",outcome="ok"}'), 3.5);
  t.equal(sample(body, 'starts_total'), 1);
  t.equal(sample(body, 'depth', '{queue="q"}'), -3);
  t.match(body, '# TYPE wait_seconds histogram');
  t.equal(sample(body, 'wait_seconds_bucket', '{le="0.1",route="r"}'), 1);
  t.equal(sample(body, 'wait_seconds_bucket', '{le="1",route="r"}'), 2);
  t.equal(sample(body, 'wait_seconds_bucket', '{le="+Inf",route="r"}'), 3);
  t.equal(sample(body, 'wait_seconds_count', '{route="r"}'), 3);
  t.equal(sample(body, 'wait_seconds_sum', '{route="r"}'), 5.55);
  t.notMatch(body, 'process_cpu', 'no process metrics unless asked for');
});

void t.test('the port rules hold as in memory', (t) => {
  const metrics = new PrometheusMetrics();
  const c = metrics.counter('hits_total', 'Hits.', ['route', 'status']);
  t.equal(metrics.counter('hits_total', 'Again.', ['status', 'route']), c, 'same instrument');
  t.throws(() => metrics.counter('hits_total', 'Hits.', ['route']), /label names/);
  t.throws(() => metrics.gauge('hits_total', 'Hits.', ['route', 'status']), /as a counter/);
  const h = metrics.histogram('size_bytes', 'Sizes.', [], [10, 100]);
  t.equal(
    metrics.histogram('size_bytes', 'Sizes.', []),
    h,
    'omitted buckets accept the registered',
  );
  t.throws(() => metrics.histogram('size_bytes', 'Sizes.', [], [10]), /buckets/);
  t.throws(() => metrics.counter('Bad-Name', 'Bad.', []), TypeError);
  t.throws(() => metrics.histogram('h_seconds', 'H.', ['le']), /reserved/);
  t.throws(() => {
    c.inc({ route: '/x' });
  }, /missing label "status"/);
  t.throws(() => {
    c.inc({ route: '/x', status: 200, extra: 1 });
  }, /unknown label "extra"/);
  t.throws(() => {
    c.inc({ route: '/x', status: 200 }, -1);
  }, RangeError);
  t.throws(() => {
    metrics.gauge('g', 'G.', []).set({}, Number.NaN);
  }, RangeError);
  t.throws(() => {
    h.observe({}, Number.POSITIVE_INFINITY);
  }, RangeError);
  t.end();
});

void t.test('process metrics are exported when asked for, and their names are taken', async (t) => {
  const metrics = new PrometheusMetrics({ processMetrics: true });
  const { body } = await metrics.exposition();
  t.match(body, '# TYPE process_cpu_user_seconds_total counter');
  t.match(body, 'nodejs_heap_size_used_bytes');
  t.throws(
    () => metrics.counter('process_cpu_user_seconds_total', 'Mine.', []),
    /already registered as a process metric/,
  );
});

void t.test('two instances have separate registries', async (t) => {
  const a = new PrometheusMetrics();
  const b = new PrometheusMetrics();
  a.counter('only_a_total', 'A.', []).inc();
  b.counter('only_a_total', 'B.', []);
  t.equal(sample((await a.exposition()).body, 'only_a_total'), 1);
  t.equal(sample((await b.exposition()).body, 'only_a_total'), 0);
});

void t.test('scrape gauges share one read per scrape', async (t) => {
  const metrics = new PrometheusMetrics();
  let reads = 0;
  const errors: unknown[] = [];
  metrics.scrapeGauges({
    gauges: {
      rows: { name: 'table_rows', help: 'Rows.' },
      age: { name: 'oldest_age_seconds', help: 'Age.' },
    },
    read: () => {
      reads++;
      return Promise.resolve({ rows: 42 + reads, age: 7.5 });
    },
    timeoutMs: 10_000,
    onError: (err) => errors.push(err),
  });
  const first = (await metrics.exposition()).body;
  t.equal(reads, 1, 'one read for both gauges');
  t.equal(sample(first, 'table_rows'), 43);
  t.equal(sample(first, 'oldest_age_seconds'), 7.5);
  t.match(first, '# TYPE table_rows gauge');
  const second = (await metrics.exposition()).body;
  t.equal(reads, 2, 'each scrape reads again');
  t.equal(sample(second, 'table_rows'), 44);
  t.same(errors, []);
  t.throws(() => metrics.gauge('table_rows', 'Again.', []), /read at scrape time/);
  t.throws(() => {
    metrics.scrapeGauges({
      gauges: { x: { name: 'table_rows', help: 'Again.' } },
      read: () => Promise.resolve({ x: 1 }),
      timeoutMs: 1,
      onError: () => undefined,
    });
  }, /already registered/);
  t.throws(() => {
    metrics.scrapeGauges({
      gauges: { x: { name: 'other_rows', help: 'Other.' } },
      read: () => Promise.resolve({ x: 1 }),
      timeoutMs: 0,
      onError: () => undefined,
    });
  }, /positive time limit/);
});

void t.test('a failed read exports NaN and is reported; the next scrape recovers', async (t) => {
  const metrics = new PrometheusMetrics();
  let fail = true;
  const errors: unknown[] = [];
  metrics.scrapeGauges({
    gauges: { n: { name: 'flaky_rows', help: 'Rows.' } },
    read: () => (fail ? Promise.reject(new Error('database down')) : Promise.resolve({ n: 3 })),
    timeoutMs: 10_000,
    onError: (err) => errors.push(err),
  });
  t.match((await metrics.exposition()).body, /^flaky_rows Nan$/m);
  t.equal(errors.length, 1, 'reported once per scrape');
  t.match(errors[0], { message: 'database down' });
  fail = false;
  t.equal(sample((await metrics.exposition()).body, 'flaky_rows'), 3);
  t.equal(errors.length, 1);
});

void t.test('a slow read times out the scrape, and the next scrape joins it', async (t) => {
  const metrics = new PrometheusMetrics();
  let reads = 0;
  let finish: (v: { n: number }) => void = () => undefined;
  const errors: unknown[] = [];
  metrics.scrapeGauges({
    gauges: { n: { name: 'slow_rows', help: 'Rows.' } },
    read: () => {
      reads++;
      return new Promise<{ n: number }>((resolve) => (finish = resolve));
    },
    timeoutMs: 5,
    onError: (err) => errors.push(err),
  });
  t.match((await metrics.exposition()).body, /^slow_rows Nan$/m);
  t.type(errors[0], ScrapeTimeoutError);
  t.match(errors[0], { message: /slow_rows took longer than 5 ms/ });
  const pending = metrics.exposition();
  finish({ n: 9 });
  t.equal(sample((await pending).body, 'slow_rows'), 9, 'the still-running read is joined');
  t.equal(reads, 1, 'never two reads at once');
});

void t.test('a missing or non-finite value in a read is exported as NaN', async (t) => {
  const metrics = new PrometheusMetrics();
  metrics.scrapeGauges({
    gauges: { a: { name: 'a_rows', help: 'A.' }, b: { name: 'b_rows', help: 'B.' } },
    read: () => Promise.resolve({ a: Number.POSITIVE_INFINITY } as { a: number; b: number }),
    timeoutMs: 10_000,
    onError: () => undefined,
  });
  const { body } = await metrics.exposition();
  t.match(body, /^a_rows Nan$/m);
  t.match(body, /^b_rows Nan$/m);
});

void t.test('fan-out writes to every sink; one sink is returned as is', (t) => {
  const memory = new InMemoryMetrics();
  const other = new InMemoryMetrics();
  t.equal(fanOutMetrics([memory]), memory);
  t.throws(() => fanOutMetrics([]), RangeError);
  const both = fanOutMetrics([memory, other]);
  both.counter('c_total', 'C.', ['k']).inc({ k: 'x' }, 2);
  both.counter('c_total', 'C.', ['k']).inc({ k: 'x' });
  both.gauge('g', 'G.', []).set({}, 4);
  both.histogram('h_seconds', 'H.', [], [1]).observe({}, 0.5);
  for (const m of [memory, other]) {
    t.equal(m.value('c_total', { k: 'x' }), 3);
    t.equal(m.value('g'), 4);
    t.same(m.observations('h_seconds', {}), [0.5]);
  }
  t.throws(() => both.counter('c_total', 'C.', []), /label names/);
  t.end();
});

/** One request to a listener: status, headers and body. */
function get(
  url: string,
  method = 'GET',
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString(),
        });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

void t.test('the listener serves the exposition on its path only', async (t) => {
  const metrics = new PrometheusMetrics();
  metrics.counter('served_total', 'Served.', []).inc();
  const errors: unknown[] = [];
  let broken = false;
  const listener = await startMetricsListener({
    host: '127.0.0.1',
    port: 0,
    path: '/metrics',
    exposition: (): Promise<Exposition> =>
      broken ? Promise.reject(new Error('render failed')) : metrics.exposition(),
    onError: (err) => errors.push(err),
  });
  t.teardown(() => listener.close());
  t.ok(listener.port > 0, 'a port was picked');
  t.equal(listener.address, `http://127.0.0.1:${String(listener.port)}`);
  const ok = await get(`${listener.address}/metrics?x=1`);
  t.equal(ok.status, 200);
  t.equal(ok.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  t.equal(sample(ok.body, 'served_total'), 1);
  const head = await get(`${listener.address}/metrics`, 'HEAD');
  t.equal(head.status, 200);
  t.equal(head.body, '');
  t.equal((await get(`${listener.address}/other`)).status, 404);
  const post = await get(`${listener.address}/metrics`, 'POST');
  t.equal(post.status, 405);
  t.equal(post.headers.allow, 'GET, HEAD');
  broken = true;
  const failed = await get(`${listener.address}/metrics`);
  t.equal(failed.status, 500);
  t.equal(failed.body, 'metrics unavailable\n');
  t.match(errors, [{ message: 'render failed' }]);
  await listener.close();
  await listener.close();
  await t.rejects(get(`${listener.address}/metrics`), 'closed');
});

void t.test('the listener reports a port it cannot bind', async (t) => {
  const first = await startMetricsListener({
    host: '127.0.0.1',
    port: 0,
    path: '/metrics',
    exposition: () => Promise.resolve({ contentType: 'text/plain', body: '' }),
    onError: () => undefined,
  });
  t.teardown(() => first.close());
  await t.rejects(
    startMetricsListener({
      host: '127.0.0.1',
      port: first.port,
      path: '/metrics',
      exposition: () => Promise.resolve({ contentType: 'text/plain', body: '' }),
      onError: () => undefined,
    }),
    { code: 'EADDRINUSE' },
  );
});

/**
 * Whether this machine has an IPv6 loopback, read from the interfaces, not
 * from the listener under test: the two are independent observations, so
 * the test below asserts something on machines with and without one.
 */
function hasIpv6Loopback(): boolean {
  return Object.values(networkInterfaces()).some((addresses) =>
    (addresses ?? []).some((a) => a.family === 'IPv6' && a.address === '::1'),
  );
}

void t.test('an IPv6 address is written in brackets, an IPv4 one without', async (t) => {
  const start = (host: string) =>
    startMetricsListener({
      host,
      port: 0,
      path: '/metrics',
      exposition: () => Promise.resolve({ contentType: 'text/plain', body: 'x' }),
      onError: () => undefined,
    });
  const v4 = await start('127.0.0.1');
  t.teardown(() => v4.close());
  t.equal(v4.address, `http://127.0.0.1:${String(v4.port)}`, 'IPv4: no brackets');
  t.equal((await get(`${v4.address}/metrics`)).body, 'x', 'and the address answers');

  if (!hasIpv6Loopback()) {
    // No ::1 here: binding it must fail with the socket's own error, not
    // hand back a listener or an address that answers nothing.
    t.comment('no IPv6 loopback on this machine: checking that ::1 is refused');
    const outcome = await start('::1').then(
      // Closed at once, so a listener that should not exist cannot keep the
      // test process alive.
      async (unexpected) => {
        await unexpected.close();
        return `listening at ${unexpected.address}`;
      },
      (err: unknown) => err,
    );
    t.match(
      outcome,
      { code: /^(EADDRNOTAVAIL|EAFNOSUPPORT)$/ },
      'binding ::1 without an IPv6 loopback fails with the socket error',
    );
    return;
  }
  // The interfaces list ::1, so a failure to bind it is a failure of the test.
  const v6 = await start('::1');
  t.teardown(() => v6.close());
  t.equal(v6.address, `http://[::1]:${String(v6.port)}`, 'IPv6: in brackets');
  t.equal((await get(`${v6.address}/metrics`)).body, 'x', 'and the address answers');
});
