/**
 * The seed of a randomized test (the model test, the bad-input fuzz). A fixed
 * seed keeps `make check` repeatable: the same cases every run, so a red run
 * is a change in the code, not in the luck of the draw. A soak run draws a
 * fresh seed each time, so repeated soaks explore new cases instead of the
 * same ones again. Either way the seed is reported, and a seed given in the
 * environment replays that exact run.
 */
import { randomInt } from 'node:crypto';
import { soak } from './soak.js';

/** Where a run's seed came from. */
export type SeedSource = 'environment' | 'fixed' | 'drawn';

/** A run's seed and where it came from. */
export interface Seed {
  /** The seed for fast-check (a 32-bit signed integer). */
  readonly value: number;
  /** `environment` when replaying, `fixed` in `make check`, `drawn` in a soak run. */
  readonly source: SeedSource;
}

/**
 * Picks the seed: the environment variable when it is set (a replay), the
 * fixed seed outside a soak run, a freshly drawn one in a soak run.
 *
 * @param variable the environment variable that replays a seed (e.g. `FUZZ_SEED`).
 * @param fixed the seed of `make check`.
 * @param env the environment (tests of this helper pass their own).
 * @param isSoak whether this is a soak run (`SOAK=1`).
 * @returns the seed and its source.
 * @throws Error when the variable is set but is not an integer fast-check accepts,
 *   so a mistyped replay fails loudly instead of running some other seed.
 * @example
 * const seed = pickSeed('FUZZ_SEED', 20260601);
 * t.comment(describeSeed('FUZZ_SEED', seed));
 */
export function pickSeed(
  variable: string,
  fixed: number,
  env: NodeJS.ProcessEnv = process.env,
  isSoak: boolean = soak,
): Seed {
  const given = env[variable];
  if (given !== undefined && given.trim() !== '') {
    const value = Number(given);
    // fast-check takes the seed modulo 2^32 silently; a value out of the
    // signed 32-bit range or not an integer would replay a different run.
    if (!Number.isInteger(value) || value < -(2 ** 31) || value >= 2 ** 31) {
      throw new Error(
        `${variable} must be an integer from -2147483648 to 2147483647, got "${given}"`,
      );
    }
    return { value, source: 'environment' };
  }
  if (isSoak) return { value: randomInt(-(2 ** 31), 2 ** 31), source: 'drawn' };
  return { value: fixed, source: 'fixed' };
}

/**
 * The line that tells a reader how to replay the run.
 *
 * @param variable the environment variable that replays a seed.
 * @param seed the seed picked.
 * @returns e.g. `seed 123 (drawn for this soak run; replay with FUZZ_SEED=123)`.
 */
export function describeSeed(variable: string, seed: Seed): string {
  const why =
    seed.source === 'environment'
      ? `from ${variable}`
      : seed.source === 'drawn'
        ? 'drawn for this soak run'
        : 'fixed';
  return `seed ${String(seed.value)} (${why}; replay with ${variable}=${String(seed.value)})`;
}
