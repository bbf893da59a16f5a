/**
 * Interleaved windows for the benchmark's steady scenarios: every scenario
 * whose figures are read as a ratio of another's is measured window by
 * window in rounds (A B C, then B C A, then C A B), not all of its windows
 * in a row. This machine's throughput drifts by up to 25% from one minute to
 * the next (docs/performance.md), so two scenarios measured minutes apart
 * differ by the drift as much as by their cost; interleaved, each ratio's
 * two sides meet the same minutes and the same table state
 * (docs/DECISIONS.md, "Benchmark ratios come from interleaved windows").
 */
import type { LoadFigures } from './load.js';

/** A scenario the rounds measure: one window of load at a time. */
export interface SteadyScenario {
  /** The scenario's id in the report (`unkeyed`, `ceiling_keyed`, ...). */
  readonly id: string;
  /** Its line in the report. */
  readonly label: string;
  /**
   * Runs one window of its load.
   *
   * @param seconds - how long the window lasts.
   * @returns the window's figures.
   */
  readonly window: (seconds: number) => Promise<LoadFigures>;
}

/** How the rounds run. */
export interface RoundOptions {
  /** Seconds of one warm-up window per scenario, before the first round (not kept). */
  readonly warmupSeconds: number;
  /** Seconds of each measured window. */
  readonly seconds: number;
  /** Rounds: measured windows per scenario. */
  readonly runs: number;
  /** Where progress lines go. */
  readonly log: (line: string) => void;
}

/**
 * The order of one round: the list rotated by the round's number, so no
 * scenario always runs first (right after the warm-up) or last.
 *
 * @param count - how many scenarios.
 * @param round - the round's number, from 0.
 * @returns the indexes of the scenarios in the round's order.
 */
export function roundOrder(count: number, round: number): number[] {
  return Array.from({ length: count }, (_, i) => (i + round) % count);
}

/**
 * The window with the median throughput (the upper one of an even count),
 * kept with its own latency and CPU figures.
 *
 * @param windows - at least one window.
 * @returns the median window.
 * @throws Error when there is no window.
 */
export function medianWindow(windows: readonly LoadFigures[]): LoadFigures {
  const sorted = [...windows].sort((a, b) => a.rps - b.rps);
  const median = sorted[Math.floor(sorted.length / 2)];
  if (median === undefined) throw new Error('no window to take a median of');
  return median;
}

/**
 * Warms every scenario once, then measures `runs` rounds of one window each.
 *
 * @param scenarios - the scenarios, in the report's order.
 * @param options - windows and rounds.
 * @returns each scenario's median window, in the scenarios' order.
 */
export async function runInterleaved(
  scenarios: readonly SteadyScenario[],
  options: RoundOptions,
): Promise<{ scenario: SteadyScenario; figures: LoadFigures }[]> {
  for (const s of scenarios) await s.window(options.warmupSeconds);
  const windows = scenarios.map((): LoadFigures[] => []);
  for (let round = 0; round < options.runs; round++) {
    for (const i of roundOrder(scenarios.length, round)) {
      windows[i]!.push(await scenarios[i]!.window(options.seconds));
    }
    options.log(`round ${String(round + 1)} of ${String(options.runs)} done`);
  }
  return scenarios.map((scenario, i) => {
    const mine = windows[i]!;
    options.log(
      `${scenario.label}: per second of the windows ${mine.map((w) => w.rps.toFixed(0)).join(', ')}`,
    );
    return { scenario, figures: medianWindow(mine) };
  });
}
