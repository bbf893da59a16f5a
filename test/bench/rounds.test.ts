/**
 * The benchmark's interleaved rounds: each round visits every steady
 * scenario once, in an order rotated by the round, after one warm-up window
 * each, and keeps each scenario's median window. The load itself runs only
 * in `make bench`.
 */
import t from 'tap';
import type { LoadFigures } from './load.js';
import { medianWindow, roundOrder, runInterleaved } from './rounds.js';

function figures(rps: number): LoadFigures {
  return {
    requests: rps,
    seconds: 1,
    rps,
    p50Ms: 1,
    p99Ms: 2,
    non2xx: 0,
    errors: 0,
    statuses: { '201': rps },
    nodeCpuUsPerRequest: 1,
    pgCpuUsPerRequest: 1,
    pgWritesPerRequest: 1,
    loadCpuUsPerRequest: 1,
  };
}

void t.test('a round rotates the order by its number', (t) => {
  t.same(roundOrder(3, 0), [0, 1, 2]);
  t.same(roundOrder(3, 1), [1, 2, 0]);
  t.same(roundOrder(3, 2), [2, 0, 1]);
  t.same(roundOrder(3, 3), [0, 1, 2]);
  t.same(roundOrder(1, 5), [0]);
  t.end();
});

void t.test('the median window is kept whole, the upper one of an even count', (t) => {
  const kept = medianWindow([figures(30), figures(10), figures(20)]);
  t.equal(kept.rps, 20);
  t.equal(medianWindow([figures(4), figures(1), figures(3), figures(2)]).rps, 3);
  t.throws(() => medianWindow([]), /no window/);
  t.end();
});

void t.test(
  'windows interleave: warm-ups first, then one window per scenario a round',
  async (t) => {
    const calls: string[] = [];
    const lines: string[] = [];
    const scenario = (id: string, rates: number[]) => {
      let n = 0;
      return {
        id,
        label: `${id} label`,
        window: (seconds: number) => {
          calls.push(`${id}:${String(seconds)}`);
          // The warm-up window is the first call; its figure is never kept.
          const rps = n === 0 ? 1_000_000 : rates[n - 1]!;
          n++;
          return Promise.resolve(figures(rps));
        },
      };
    };
    const measured = await runInterleaved(
      [scenario('a', [5, 9, 7]), scenario('b', [1, 3, 2]), scenario('c', [40, 60, 50])],
      { warmupSeconds: 2, seconds: 10, runs: 3, log: (l) => lines.push(l) },
    );
    t.same(calls, [
      'a:2',
      'b:2',
      'c:2',
      'a:10',
      'b:10',
      'c:10',
      'b:10',
      'c:10',
      'a:10',
      'c:10',
      'a:10',
      'b:10',
    ]);
    t.same(
      measured.map((m) => [m.scenario.id, m.figures.rps]),
      [
        ['a', 7],
        ['b', 2],
        ['c', 50],
      ],
    );
    t.ok(
      lines.includes('a label: per second of the windows 5, 9, 7'),
      'each scenario logs its windows in the order measured',
    );
  },
);
