/**
 * The long variants of the reliability suite. `make check` runs each
 * reliability test in its short form; `make soak` sets `SOAK=1` and the same
 * tests run longer (more steps, more requests, more restarts).
 */

/** True when the run is a soak run (`SOAK=1`, set by `make soak`). */
export const soak: boolean = process.env['SOAK'] === '1';

/**
 * Picks the size of a test by run kind.
 *
 * @param short the size in `make check`.
 * @param long the size in `make soak`.
 * @returns `long` in a soak run, `short` otherwise.
 */
export function bySoak(short: number, long: number): number {
  return soak ? long : short;
}
