/**
 * The source of the current time.
 *
 * Code that stamps or compares times asks a Clock rather than `new Date()`, so
 * tests can hold time still or move it on with a {@link ManualClock}.
 */
export interface Clock {
  /**
   * Tells the current time.
   *
   * @returns a new Date the caller may keep or mutate freely.
   */
  now(): Date;
}

/** The wall clock of this machine. Frozen, so no caller can swap its method. */
export const systemClock: Clock = Object.freeze({
  now: (): Date => new Date(),
});

/** The largest time a Date can hold (ECMA-262 section 21.4.1.22). */
const MAX_TIME = 8.64e15;

function toTime(value: Date | string): number {
  const ms = typeof value === 'string' ? Date.parse(value) : value.getTime();
  if (Number.isNaN(ms)) {
    const shown = typeof value === 'string' ? JSON.stringify(value) : 'Invalid Date';
    throw new TypeError(`ManualClock: invalid time ${shown}`);
  }
  return ms;
}

/**
 * A clock that moves only when told to: for tests, and for tools that replay
 * work at a chosen time.
 *
 * @example
 * const clock = new ManualClock('2030-01-01T00:00:00Z');
 * clock.advance(24 * 60 * 60 * 1000); // a day later
 */
export class ManualClock implements Clock {
  // Kept as a number so no Date the clock hands out can alias its state.
  #ms: number;

  /**
   * @param start - the initial time, as a Date (copied) or a string that
   *   `Date.parse` understands (use ISO 8601 with a zone to be unambiguous).
   * @throws {TypeError} when `start` is not a valid time.
   */
  constructor(start: Date | string) {
    this.#ms = toTime(start);
  }

  /**
   * Tells the clock's time.
   *
   * @returns a fresh Date on each call.
   */
  now(): Date {
    return new Date(this.#ms);
  }

  /**
   * Jumps to a time, earlier or later than the current one.
   *
   * @param date - the new time, as a Date (copied) or a parseable string.
   * @throws {TypeError} when `date` is not a valid time; the clock is unchanged.
   */
  set(date: Date | string): void {
    this.#ms = toTime(date);
  }

  /**
   * Moves time forward. Going back is only possible with {@link ManualClock.set},
   * so a sign slip in a test fails loudly instead of reversing time.
   *
   * @param ms - milliseconds to add: finite and not negative.
   * @throws {RangeError} when `ms` is negative or not finite, or the result
   *   would be past the last time a Date can hold; the clock is unchanged.
   */
  advance(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) {
      throw new RangeError(
        `ManualClock.advance: expected a finite, non-negative number of ms, got ${ms}`,
      );
    }
    const next = this.#ms + ms;
    if (next > MAX_TIME) {
      throw new RangeError(`ManualClock.advance: ${ms} ms goes past the last time a Date can hold`);
    }
    this.#ms = next;
  }
}
