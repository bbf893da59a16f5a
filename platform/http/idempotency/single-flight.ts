/**
 * The in-process queue of duplicates: while a keyed request runs, a repeat
 * of it in the same process waits here, in memory, instead of on a pool
 * connection at the key's primary key, so N duplicates cannot starve the
 * pool for everyone else. Plain TypeScript: testable without Fastify.
 */
import { performance } from 'node:perf_hooks';

/** A turn on a key, held until released. */
export interface Turn {
  /** Gives the turn to the next waiter. Safe to call twice. */
  release(): void;
}

/** What {@link SingleFlight.acquire} got. */
export interface Acquired {
  /** The turn, or null when the wait budget ran out first. */
  readonly turn: Turn | null;
  /** Whether this request waited behind another one. */
  readonly waited: boolean;
  /** How long it waited, in seconds (0 when it did not). */
  readonly waitedSeconds: number;
}

/** One queue of turns per key. */
export class SingleFlight {
  private readonly holders = new Map<string, Promise<undefined>>();
  private waitingNow = 0;

  /**
   * @param onWaiters called with the number of requests waiting whenever it changes.
   */
  constructor(private readonly onWaiters: (count: number) => void = () => undefined) {
    onWaiters(0);
  }

  /** How many requests wait right now. */
  get waiting(): number {
    return this.waitingNow;
  }

  /**
   * Takes the turn on a key: waits while another request holds it (up to
   * the budget), then becomes the holder in the same tick as the check, so
   * waiters woken together cannot all proceed.
   *
   * @param key the key (principal and key joined).
   * @param budgetMs how long to wait at most.
   * @returns the turn (null when the budget ran out) and how long it waited.
   */
  async acquire(key: string, budgetMs: number): Promise<Acquired> {
    const started = performance.now();
    const deadline = started + budgetMs;
    let waited = false;
    const result = (turn: Turn | null): Acquired => ({
      turn,
      waited,
      waitedSeconds: waited ? (performance.now() - started) / 1000 : 0,
    });
    try {
      for (let ahead = this.holders.get(key); ahead !== undefined; ahead = this.holders.get(key)) {
        const left = deadline - performance.now();
        if (left <= 0) return result(null);
        if (!waited) {
          waited = true;
          this.waitingNow++;
          this.onWaiters(this.waitingNow);
        }
        let timer: NodeJS.Timeout | undefined;
        const finished = await Promise.race([
          ahead.then(() => true),
          new Promise<boolean>((resolve) => {
            timer = setTimeout(() => {
              resolve(false);
            }, left);
          }),
        ]);
        clearTimeout(timer);
        if (!finished) return result(null);
      }
      // No holder now, and nothing has run since the check: hold it.
      const { promise: mine, resolve } = Promise.withResolvers<undefined>();
      this.holders.set(key, mine);
      return result({
        release: () => {
          if (this.holders.get(key) === mine) this.holders.delete(key);
          resolve(undefined);
        },
      });
    } finally {
      if (waited) {
        this.waitingNow--;
        this.onWaiters(this.waitingNow);
      }
    }
  }
}
