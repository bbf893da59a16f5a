/**
 * The seed of a randomized test (the model test, the bad-input fuzz). Every
 * run draws a fresh seed, `make check` included, so each run explores cases
 * no earlier run tried; the seed is printed, and a seed given in the
 * environment replays that exact run: `SEED=<seed>` for any randomized
 * test, or the test's own variable (`FUZZ_SEED`, `MODEL_SEED`), which wins
 * when both are set.
 */
import { randomInt } from 'node:crypto';

/** Where a run's seed came from. */
export type SeedSource = 'environment' | 'drawn';

/** A run's seed and where it came from. */
export interface Seed {
  /** The seed for fast-check (a 32-bit signed integer). */
  readonly value: number;
  /** `environment` when replaying, `drawn` otherwise. */
  readonly source: SeedSource;
  /** The variable that gave it (`SEED` or the test's own); `SEED` for a drawn one. */
  readonly variable: string;
}

function parse(variable: string, given: string): number {
  const value = Number(given);
  // fast-check takes the seed modulo 2^32 silently; a value out of the
  // signed 32-bit range or not an integer would replay a different run.
  if (given.trim() === '' || !Number.isInteger(value) || value < -(2 ** 31) || value >= 2 ** 31) {
    throw new Error(
      `${variable} must be an integer from -2147483648 to 2147483647, got "${given}"`,
    );
  }
  return value;
}

/**
 * Picks the seed: the test's own variable when it is set, else `SEED` when
 * it is set (a replay), else a freshly drawn one.
 *
 * @param variable the test's own variable that replays a seed (e.g. `FUZZ_SEED`).
 * @param env the environment (tests of this helper pass their own).
 * @returns the seed and its source.
 * @throws Error when a variable is set but is not an integer fast-check
 *   accepts, so a mistyped replay fails loudly instead of running some other seed.
 * @example
 * const seed = pickSeed('FUZZ_SEED');
 * t.comment(describeSeed(seed));
 */
export function pickSeed(variable: string, env: NodeJS.ProcessEnv = process.env): Seed {
  for (const name of [variable, 'SEED']) {
    const given = env[name];
    if (given !== undefined && given.trim() !== '') {
      return { value: parse(name, given), source: 'environment', variable: name };
    }
  }
  return { value: randomInt(-(2 ** 31), 2 ** 31), source: 'drawn', variable: 'SEED' };
}

/**
 * The line that tells a reader how to replay the run.
 *
 * @param seed the seed picked.
 * @returns e.g. `seed 123 (drawn for this run; replay with SEED=123)`.
 */
export function describeSeed(seed: Seed): string {
  const why = seed.source === 'environment' ? `from ${seed.variable}` : 'drawn for this run';
  return `seed ${String(seed.value)} (${why}; replay with SEED=${String(seed.value)})`;
}

/**
 * A small deterministic pseudo-random sequence (mulberry32): enough to
 * pick a test's cases, the same numbers for the same seed on every run.
 *
 * @param seed any integer; only its low 32 bits count.
 * @returns a function giving the next number, from 0 inclusive to 1 exclusive.
 */
export function randomSequence(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let x = s;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}
