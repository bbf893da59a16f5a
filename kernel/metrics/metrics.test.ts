import t from 'tap';
import { DEFAULT_BUCKETS, InMemoryMetrics, type Metrics } from './index.js';

void t.test('a counter adds one by default, or the given amount, per label set', (t) => {
  const metrics = new InMemoryMetrics();
  const jobs = metrics.counter('jobs_total', 'Jobs run.', ['task', 'outcome']);
  jobs.inc({ task: 'sync:cleanup', outcome: 'success' });
  jobs.inc({ task: 'sync:cleanup', outcome: 'success' }, 2.5);
  jobs.inc({ outcome: 'failure', task: 'sync:cleanup' });
  t.equal(metrics.value('jobs_total', { task: 'sync:cleanup', outcome: 'success' }), 3.5);
  t.equal(
    metrics.value('jobs_total', { outcome: 'failure', task: 'sync:cleanup' }),
    1,
    'label order does not matter',
  );
  t.equal(
    metrics.value('jobs_total', { task: 'other', outcome: 'success' }),
    undefined,
    'an unseen series has no value',
  );

  const plain = metrics.counter('starts_total', 'Starts.', []);
  plain.inc();
  plain.inc(undefined, 4);
  t.equal(metrics.value('starts_total'), 5, 'a counter without labels needs none');
  t.end();
});

void t.test('a counter only goes up', (t) => {
  const metrics = new InMemoryMetrics();
  const c = metrics.counter('things_total', 'Things.', []);
  t.throws(() => {
    c.inc({}, -1);
  }, RangeError);
  t.throws(() => {
    c.inc({}, Number.NaN);
  }, RangeError);
  t.throws(() => {
    c.inc({}, Number.POSITIVE_INFINITY);
  }, RangeError);
  c.inc({}, 0);
  t.equal(metrics.value('things_total', {}), 0, 'adding zero is allowed and creates the series');
  t.end();
});

void t.test('a gauge holds the last value set', (t) => {
  const metrics = new InMemoryMetrics();
  const g = metrics.gauge('queue_depth', 'Jobs waiting.', ['queue']);
  g.set({ queue: 'maintenance' }, 7);
  g.set({ queue: 'maintenance' }, -2);
  g.set({ queue: 'mail' }, 1);
  t.equal(metrics.value('queue_depth', { queue: 'maintenance' }), -2);
  t.equal(metrics.value('queue_depth', { queue: 'mail' }), 1);
  t.throws(() => {
    g.set({ queue: 'mail' }, Number.NaN);
  }, RangeError);
  t.end();
});

void t.test('a histogram keeps observations, cumulative buckets, count and sum', (t) => {
  const metrics = new InMemoryMetrics();
  const h = metrics.histogram('job_duration_seconds', 'Job run time.', ['task'], [0.1, 1, 10]);
  for (const v of [0.05, 0.1, 0.5, 3, 20]) h.observe({ task: 'a:b' }, v);
  t.same(metrics.observations('job_duration_seconds', { task: 'a:b' }), [0.05, 0.1, 0.5, 3, 20]);
  t.same(
    metrics.observations('job_duration_seconds', { task: 'c:d' }),
    [],
    'an unseen series has none',
  );
  const [family] = metrics.snapshot();
  t.same(family, {
    name: 'job_duration_seconds',
    help: 'Job run time.',
    type: 'histogram',
    labelNames: ['task'],
    buckets: [0.1, 1, 10],
    series: [
      {
        labels: { task: 'a:b' },
        count: 5,
        sum: 23.65,
        buckets: [
          { le: 0.1, count: 2 },
          { le: 1, count: 3 },
          { le: 10, count: 4 },
          { le: Number.POSITIVE_INFINITY, count: 5 },
        ],
      },
    ],
  });
  t.throws(() => {
    h.observe({ task: 'a:b' }, Number.NaN);
  }, RangeError);
  t.end();
});

void t.test('a histogram without buckets uses the defaults; bad buckets are refused', (t) => {
  const metrics = new InMemoryMetrics();
  metrics.histogram('latency_seconds', 'Latency.', []);
  const [family] = metrics.snapshot();
  t.same(family?.type === 'histogram' ? family.buckets : undefined, DEFAULT_BUCKETS);
  t.same(DEFAULT_BUCKETS, [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);
  t.throws(() => metrics.histogram('a_seconds', 'A.', [], []), /at least one bucket/);
  t.throws(() => metrics.histogram('b_seconds', 'B.', [], [1, 1]), /strictly increasing/);
  t.throws(() => metrics.histogram('c_seconds', 'C.', [], [2, 1]), /strictly increasing/);
  t.throws(() => metrics.histogram('d_seconds', 'D.', [], [1, Number.POSITIVE_INFINITY]), /finite/);
  t.throws(() => metrics.histogram('e_seconds', 'E.', ['le'], [1]), /reserved/);
  t.end();
});

void t.test('registering a name again returns the same instrument when it agrees', (t) => {
  const metrics = new InMemoryMetrics();
  const a = metrics.counter('hits_total', 'Hits.', ['route', 'status']);
  const b = metrics.counter('hits_total', 'Hits, again.', ['status', 'route']);
  t.equal(a, b, 'same instrument, whatever the label order');
  a.inc({ route: '/x', status: '200' });
  b.inc({ route: '/x', status: '200' });
  t.equal(metrics.value('hits_total', { route: '/x', status: '200' }), 2);

  const h = metrics.histogram('size_bytes', 'Sizes.', [], [10, 100]);
  t.equal(
    metrics.histogram('size_bytes', 'Sizes.', []),
    h,
    'omitted buckets accept the registered ones',
  );
  t.equal(metrics.histogram('size_bytes', 'Sizes.', [], [10, 100]), h);

  t.throws(() => metrics.counter('hits_total', 'Hits.', ['route']), /label names/);
  t.throws(
    () => metrics.counter('hits_total', 'Hits.', ['route', 'status', 'method']),
    /label names/,
  );
  t.throws(
    () => metrics.gauge('hits_total', 'Hits.', ['route', 'status']),
    /already registered as a counter/,
  );
  t.throws(() => metrics.histogram('size_bytes', 'Sizes.', [], [10, 1000]), /buckets/);
  t.equal(metrics.snapshot().length, 2, 'no extra family was made');
  t.end();
});

void t.test('metric and label names must be snake case', (t) => {
  const metrics = new InMemoryMetrics();
  for (const bad of [
    'HttpRequests',
    'http-requests',
    '1st_total',
    'a__b',
    'trailing_',
    '_lead',
    '',
    'a.b',
    'é_total',
  ]) {
    t.throws(
      () => metrics.counter(bad, 'Bad.', []),
      TypeError,
      `metric name ${JSON.stringify(bad)}`,
    );
  }
  for (const bad of ['Task', 'task-id', '__name', 'x_']) {
    t.throws(
      () => metrics.gauge('ok_gauge', 'Ok.', [bad]),
      TypeError,
      `label name ${JSON.stringify(bad)}`,
    );
  }
  t.throws(() => metrics.gauge('dup_gauge', 'Dup.', ['a', 'a']), /twice/);
  t.throws(() => metrics.counter('no_help_total', '', []), /help/);
  t.same(metrics.snapshot(), [], 'nothing refused was registered');
  metrics.counter('http_requests_2xx_total', 'Fine.', ['status_code']);
  t.end();
});

void t.test('labels given on use must be exactly the declared ones', (t) => {
  const metrics = new InMemoryMetrics();
  const c = metrics.counter('calls_total', 'Calls.', ['route']);
  t.throws(() => {
    c.inc({});
  }, /missing label "route"/);
  t.throws(() => {
    c.inc({ route: '/a', extra: 'x' });
  }, /unknown label "extra"/);
  t.throws(() => {
    c.inc();
  }, /missing label "route"/);
  c.inc({ route: 404 });
  t.equal(metrics.value('calls_total', { route: '404' }), 1, 'numbers become strings');
  t.equal(metrics.value('calls_total', { route: 404 }), 1);
  t.throws(() => metrics.value('calls_total', { nope: 'x' }), /unknown label/);
  t.end();
});

void t.test('read-back refuses names never registered and the wrong kind', (t) => {
  const metrics = new InMemoryMetrics();
  metrics.counter('a_total', 'A.', []);
  metrics.histogram('b_seconds', 'B.', []);
  t.throws(() => metrics.value('missing_total'), /not registered/);
  t.throws(() => metrics.observations('missing_seconds', {}), /not registered/);
  t.throws(() => metrics.value('b_seconds'), /histogram/);
  t.throws(() => metrics.observations('a_total', {}), /counter/);
  t.end();
});

void t.test('a snapshot is sorted, complete and detached', (t) => {
  const metrics = new InMemoryMetrics();
  const g = metrics.gauge('z_gauge', 'Z.', ['k']);
  const c = metrics.counter('a_total', 'A.', ['k']);
  g.set({ k: 'b' }, 2);
  g.set({ k: 'a' }, 1);
  c.inc({ k: 'x' });
  const snap = metrics.snapshot();
  t.same(snap, [
    {
      name: 'a_total',
      help: 'A.',
      type: 'counter',
      labelNames: ['k'],
      series: [{ labels: { k: 'x' }, value: 1 }],
    },
    {
      name: 'z_gauge',
      help: 'Z.',
      type: 'gauge',
      labelNames: ['k'],
      series: [
        { labels: { k: 'a' }, value: 1 },
        { labels: { k: 'b' }, value: 2 },
      ],
    },
  ]);
  c.inc({ k: 'x' });
  const first = snap[0];
  t.equal(
    first?.type === 'counter' ? first.series[0]?.value : undefined,
    1,
    'later changes do not reach an old snapshot',
  );
  t.ok(Object.isFrozen(snap), 'frozen');
  t.end();
});

void t.test('InMemoryMetrics is usable through the port', (t) => {
  const memory = new InMemoryMetrics();
  const port: Metrics = memory;
  port.counter('port_total', 'Port.', []).inc();
  port.histogram('port_seconds', 'Port.', []).observe({}, 1);
  port.gauge('port_gauge', 'Port.', []).set({}, 1);
  t.equal(memory.value('port_total'), 1);
  t.equal(memory.value('port_gauge'), 1);
  t.same(memory.observations('port_seconds', {}), [1]);
  t.end();
});
