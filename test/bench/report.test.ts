/**
 * The benchmark's arithmetic: targets judged from figures, the stdout
 * report, the chart, and /proc stat parsing. The load itself runs only in
 * `make bench`.
 */
import t from 'tap';
import { parseProcIo, parseProcStat } from './proc.js';
import {
  formatClient,
  formatReport,
  floorHoldMs,
  formatFloorBound,
  formatTracingCost,
  httpFloorBound,
  judgeTargets,
  renderChart,
  table,
  type BenchFigures,
  type ScenarioFigures,
} from './report.js';

function s(id: string, rps: number, p99Ms = 10): ScenarioFigures {
  return {
    id,
    label: `${id} <label>`,
    rps,
    p50Ms: p99Ms / 2,
    p99Ms,
    requests: rps * 10,
    non2xx: 0,
    errors: 0,
    nodeCpuUs: 300,
    pgCpuUs: 400,
    pgWrites: 4.5,
    loadCpuUs: 90,
  };
}

function figures(
  overrides: Partial<Record<string, number>> = {},
  effects = [1, 1, 1],
): BenchFigures {
  const v = (id: string, d: number): number => overrides[id] ?? d;
  return {
    scenarios: [
      s('limit_unkeyed', v('limit_unkeyed', 2000)),
      s('limit_keyed', 1700),
      s('ceiling_unkeyed', v('ceiling_unkeyed', 1200)),
      s('ceiling_keyed', v('ceiling_keyed', 1100)),
      s('unkeyed', v('unkeyed', 1000)),
      s('keyed', v('keyed', 900)),
      s('read', v('read', 5000)),
      s('replay', v('replay', 4600)),
      s('keyed_1m', v('keyed_1m', 880)),
      s('cleanup_without', 850, v('without_p99', 20)),
      s('cleanup_during', 800, v('during_p99', 25)),
      s('peer', v('peer', 950)),
    ],
    bursts: {
      count: effects.length,
      size: 64,
      medianMs: 40,
      maxMs: 60,
      effectsPerBurst: effects,
      answers: { '201': 3, '201 replay': 189 },
    },
    cleanup: {
      rows: 1_000_000,
      aloneRowsPerSecond: v('cleanup', 310_000),
      bareDeleteRowsPerSecond: 350_000,
      underLoadRowsPerSecond: 90_000,
    },
    client: {
      runs: 20,
      nodeMedianMs: 40,
      httpMedianMs: 15,
      transferMedianMs: 110,
      transferMaxMs: 180,
      overheadMedianMs: v('client_overhead', 55),
      overheadMaxMs: 120,
      exitAfterWriteMedianMs: v('client_exit', 4),
      exitAfterWriteMaxMs: 30,
    },
  };
}

void t.test('targets are judged from the ratios, at their thresholds', (t) => {
  const met = judgeTargets(figures());
  t.same(
    met.map((r) => [r.name, r.met]),
    [
      ['unkeyed HTTP / in-process ceiling', true],
      ['keyed / unkeyed throughput', true],
      ['replay / authenticated read of the same resource', true],
      ['keyed at 1M keys / at 0 keys', true],
      ['ours / peer keyed throughput', true],
      ['keyed p99 during cleanup / without', true],
      ['cleanup alone / bare batched DELETE of the same rows', true],
      ['effects per burst of identical requests (all bursts)', true],
      ['in-process ceiling / physical limit, unkeyed', true],
      ['client transfer less node -e 0 and its HTTP exchanges, median ms', true],
      ['client exit after its last write, median ms', true],
    ],
  );
  t.equal(met[8]!.value, 0.6);
  t.equal(met[1]!.value, 0.9);
  t.equal(met[2]!.value, 0.92);
  t.equal(met[5]!.value, 1.25);

  const missed = judgeTargets(
    figures(
      {
        ceiling_unkeyed: 1300,
        keyed: 800,
        replay: 4400,
        keyed_1m: 700,
        during_p99: 30,
        cleanup: 279_999,
        peer: 1000,
        limit_unkeyed: 3000,
        client_overhead: 61,
        client_exit: 21,
      },
      [1, 2, 1],
    ),
  );
  t.same(
    missed.map((r) => r.met),
    [false, false, false, false, false, false, false, false, false, false, false],
    'every target can be missed',
  );
  t.equal(missed[1]!.value, 0.8);
  t.same(judgeTargets(figures({}, []))[7]!.met, false, 'no bursts measured is not a met target');
  t.end();
});

void t.test('a target exactly at its threshold is met; NaN never is', (t) => {
  const exact = judgeTargets(figures({ unkeyed: 1000, keyed: 850, keyed_1m: 807.5 }));
  t.equal(exact[1]!.met, true);
  const nan = judgeTargets(figures({ unkeyed: 0, keyed: 0 }));
  t.equal(nan[1]!.met, false, '0 / 0 is NaN, not met');
  t.end();
});

void t.test('the client targets are met at 60 and 20 ms, never when it did not run', (t) => {
  const exact = judgeTargets(figures({ client_overhead: 60, client_exit: 20 }));
  t.same(
    exact.slice(9).map((r) => [r.value, r.met]),
    [
      [60, true],
      [20, true],
    ],
  );
  const f = figures();
  const none = { ...f.client, runs: 0, overheadMedianMs: NaN, exitAfterWriteMedianMs: NaN };
  t.same(
    judgeTargets({ ...f, client: none })
      .slice(9)
      .map((r) => r.met),
    [false, false],
    'a client scenario that did not run is no met target',
  );
  t.equal(formatClient(none), '', 'and prints no line');
  t.end();
});

void t.test('judging a run without a scenario names the scenario', (t) => {
  const f = figures();
  t.throws(
    () => judgeTargets({ ...f, scenarios: f.scenarios.filter((x) => x.id !== 'peer') }),
    /no scenario "peer"/,
  );
  t.end();
});

void t.test('the report and the table align their columns and mark misses', (t) => {
  t.equal(table(['a', 'bb'], [['xxx', 'y']]), 'a    bb\n---  --\nxxx  y ');
  const text = formatReport(figures({ keyed: 800 }));
  t.match(text, /keyed \/ unkeyed throughput\s+0\.80\s+>= 0\.85\s+MISSED/);
  t.match(text, /replay \/ authenticated read of the same resource\s+0\.92\s+>= 0\.9\s+met/);
  t.match(text, /unkeyed HTTP \/ in-process ceiling\s+0\.83\s+>= 0\.8\s+met/);
  t.match(text, /pg writes\/req/, 'the writes to PostgreSQL per request are a column');
  t.match(text, /\s4\.5\s/);
  t.match(text, /load us\/req/, "the load generator's CPU per request is a column");
  t.match(text, /\s4\.5\s+90\s*$/m, 'its figure follows the writes');
  t.match(text, /cleanup alone \/ bare batched DELETE of the same rows\s+0\.89\s+>= 0\.8\s+met/);
  t.match(text, /bare batched DELETE 350000 rows\/s/);
  t.match(text, /effects per burst: 1; answers: 201 3, 201 replay 189/);
  t.match(
    text,
    /^client transfer, 20 runs: median 110\.0 ms, max 180\.0 ms \(node -e 0 median 40\.0 ms, its HTTP exchanges median 15\.0 ms\); over both: median 55\.0 ms, max 120\.0 ms; exit after its last write: median 4\.0 ms, max 30\.0 ms$/m,
  );
  t.match(
    text,
    /client transfer less node -e 0 and its HTTP exchanges, median ms\s+55\.00\s+<= 60\s+met/,
  );
  t.match(text, /client exit after its last write, median ms\s+4\.00\s+<= 20\s+met/);
  t.end();
});

/** The plain floor's figures: 60 us of Node.js and 90 us of load generator per request. */
function plainFloor(): ScenarioFigures {
  return { ...s('http_floor', 9000), nodeCpuUs: 60, pgCpuUs: 0, loadCpuUs: 90 };
}

void t.test('the HTTP floor bounds unkeyed HTTP / ceiling by CPU per request', (t) => {
  const run = figures();
  const floor = plainFloor();
  const withFloor = { ...run, scenarios: [...run.scenarios, floor] };
  // The ceiling costs 300 + 400 us per call; the floor adds 60 + 90 us.
  t.equal(httpFloorBound(withFloor).toFixed(4), (700 / 850).toFixed(4));
  t.match(formatFloorBound(withFloor), /bound 0\.82 .*measured 0\.83/);
  t.ok(Number.isNaN(httpFloorBound(run)), 'NaN without the floor scenario');
  t.equal(formatFloorBound(run), '', 'and no line');
  t.end();
});

void t.test(
  'the held floor bounds it again at the baseline latency, beside the plain floor',
  (t) => {
    const run = figures();
    const floor = plainFloor();
    const held: ScenarioFigures = {
      ...s('http_floor_held', 9000),
      nodeCpuUs: 150,
      pgCpuUs: 10,
      loadCpuUs: 140,
    };
    const both = { ...run, scenarios: [...run.scenarios, floor, held] };
    // The ceiling costs 300 + 400 us per call; the held floor adds 150 + 140
    // us (its 10 us of PostgreSQL are background work: it has no database).
    t.equal(httpFloorBound(both, 'http_floor_held').toFixed(4), (700 / 990).toFixed(4));
    t.equal(httpFloorBound(both).toFixed(4), (700 / 850).toFixed(4), 'the plain floor by default');
    t.match(
      formatFloorBound(both),
      /bound 0\.82 .*, 0\.71 with each answer held for the baseline's mean latency, measured 0\.83/,
    );
    const heldOnly = { ...run, scenarios: [...run.scenarios, held] };
    t.match(formatFloorBound(heldOnly), /bound 0\.71 with each answer held .*measured 0\.83/);
    t.ok(Number.isNaN(httpFloorBound(run, 'http_floor_held')), 'NaN without the held floor');
    t.end();
  },
);

void t.test('the hold of the held floor is the baseline mean time in flight', (t) => {
  t.equal(floorHoldMs(16, 1000), 16, '16 connections at 1,000 req/s: 16 ms each');
  t.equal(floorHoldMs(16, 800), 20);
  t.equal(floorHoldMs(16, 0), 0, 'no baseline yet: no hold');
  t.equal(floorHoldMs(16, Number.NaN), 0);
  t.equal(floorHoldMs(16, 1000, 1.5), 14.5, "less the plain floor's own latency");
  t.equal(floorHoldMs(16, 1000, 20), 0, 'never below 0');
  t.end();
});

void t.test('the chart is SVG with one bar per scenario, labels escaped', (t) => {
  const svg = renderChart(figures(), 'machine <x> & y');
  t.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  t.equal(svg.match(/<rect x="300"/g)?.length, 12);
  t.match(svg, /machine &lt;x&gt; &amp; y/);
  t.match(svg, /unkeyed &lt;label&gt;/);
  t.notMatch(svg, /<label>/);
  // The largest throughput (the read, 5000) gets the full bar width.
  t.match(svg, /width="420" height="22"/);
  t.end();
});

void t.test('/proc stat lines are read from after the command name', (t) => {
  const line =
    '4242 (node (a) b) S 17 4242 17 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 11 0 1000 0 0';
  t.same(parseProcStat(line, 100), { pid: 4242, ppid: 17, cpuMicros: 3_000_000 });
  t.throws(() => parseProcStat('garbage', 100), /not a \/proc stat line/);
  t.throws(() => parseProcStat('1 (x) S y', 100), /not a \/proc stat line/);
  t.end();
});

void t.test('/proc io counts the write system calls', (t) => {
  const text = 'rchar: 6976\nwchar: 10\nsyscr: 10\nsyscw: 42\nread_bytes: 0\n';
  t.same(parseProcIo(text), { syscr: 10, syscw: 42 });
  t.throws(() => parseProcIo('garbage'), /not a \/proc io file/);
  t.end();
});

void t.test('tracing on against off: throughput ratio and CPU added per request', (t) => {
  const run = figures();
  t.equal(formatTracingCost(run), '', 'no line without the traced scenarios');
  const on = (id: string, rps: number, nodeCpuUs: number, pgCpuUs: number): ScenarioFigures => ({
    ...s(id, rps),
    nodeCpuUs,
    pgCpuUs,
  });
  const traced = {
    ...run,
    scenarios: [
      ...run.scenarios,
      on('traced_unkeyed', 850, 420, 410),
      on('traced_keyed', 630, 390, 400),
    ],
  };
  // unkeyed: 1000 req/s at 300 + 400 us; keyed: 900 req/s at the same.
  const text = formatTracingCost(traced);
  t.match(
    text,
    /tracing on \/ off, unkeyed: req\/s 0\.85, Node\.js \+120 us\/req, PostgreSQL \+10 us\/req/,
  );
  t.match(
    text,
    /tracing on \/ off, keyed: req\/s 0\.70, Node\.js \+90 us\/req, PostgreSQL \+0 us\/req/,
  );
  t.equal(text.split('\n').length, 2, 'a line per pair');
  const onlyKeyed = { ...run, scenarios: [...run.scenarios, on('traced_keyed', 450, 600, 400)] };
  t.match(
    formatTracingCost(onlyKeyed),
    /^tracing on \/ off, keyed: req\/s 0\.50, Node\.js \+300 us\/req, PostgreSQL \+0 us\/req$/,
  );
  t.match(formatReport(traced), /tracing on \/ off, keyed/, 'in the report');
  t.end();
});

void t.test('tracing on: the request spans the collector received of the requests sent', (t) => {
  const run = figures();
  const traced = { ...run, scenarios: [...run.scenarios, s('traced_unkeyed', 850)] };
  t.notMatch(formatTracingCost(traced), /received/, 'no line without the counts');
  const all = formatTracingCost({
    ...traced,
    tracing: { sent: 1000, requestSpans: 1000, spans: 9500 },
  });
  t.match(
    all,
    /\ntracing on: 1000 request spans received of 1000 requests sent, 9\.5 spans per request$/,
  );
  const short = formatTracingCost({
    ...traced,
    tracing: { sent: 1000, requestSpans: 900, spans: 8550 },
  });
  t.match(
    short,
    /tracing on: 900 request spans received of 1000 requests sent \(100 short: spans dropped, so the cost above is understated\), 9\.5 spans per request$/,
  );
  t.end();
});
