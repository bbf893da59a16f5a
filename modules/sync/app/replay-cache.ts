/**
 * An in-process cache of completed idempotency keys for the replay fast
 * path: a repeat of a key this process has already read from the database
 * is answered from memory, without a round trip.
 *
 * It is safe because a completed row never changes until it expires
 * (docs/DECISIONS.md, "Completed keys replayed from memory"): the row is
 * written once, in the transaction of its effect, and afterwards only
 * deleted, by the cleanup job once expired or by the cascade of its
 * principal's removal (whose tokens then stop authenticating, so no
 * request reaches the cache in its name). An entry is served:
 *
 * - only to the principal and key it was read for (the row's primary key);
 * - never at or past the row's `expires_at`, judged on the kernel clock the
 *   way the database read judges it;
 * - for at most the TTL since it was read, on a monotonic clock, which
 *   bounds how long a change made outside the application (an operator
 *   deleting a row by hand) can go unseen.
 *
 * Only completed entries are kept, their bodies frozen and their
 * fingerprints copied, so no caller can change what a later replay sends. The least
 * recently used entry goes first (kernel/cache keeps the entries).
 */
import { BoundedCache } from '../../../kernel/cache/index.js';
import type { IdempotencyEntry } from '../../../kernel/idempotency/index.js';

/** Options of {@link ReplayCache}. */
export interface ReplayCacheOptions {
  /** How long an entry may be served after its read, in milliseconds; 0 keeps nothing. */
  readonly ttlMs: number;
  /** Most entries kept; the least recently used goes first. */
  readonly maxEntries: number;
  /** A monotonic clock in milliseconds; `performance.now` by default (tests pass their own). */
  readonly now?: () => number;
}

/** Freezes a JSON value (the stored body) and everything in it. */
function deepFreeze<V>(value: V): V {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/** The cache; see the module comment for when it serves an entry. */
export class ReplayCache {
  readonly #slots: BoundedCache<string, IdempotencyEntry>;

  /**
   * @param options TTL and size.
   * @throws RangeError when the TTL is not 0 or more, or the size not a positive integer.
   */
  constructor(options: ReplayCacheOptions) {
    this.#slots = new BoundedCache(options);
  }

  /** How many entries are held. */
  get size(): number {
    return this.#slots.size;
  }

  /**
   * The completed entry kept for a principal's key, when it may be served.
   *
   * @param principalId the owner of the key.
   * @param key the idempotency key.
   * @param now the kernel clock's time, against the row's expiry.
   * @returns the entry, or undefined when none may be served.
   */
  get(principalId: string, key: string, now: Date): IdempotencyEntry | undefined {
    return this.#slots.get(slotId(principalId, key), now.getTime());
  }

  /**
   * Keeps a completed entry read from the database (anything else is
   * ignored), frozen, evicting the least recently used one when full.
   *
   * @param principalId the owner of the key.
   * @param key the idempotency key.
   * @param entry the completed entry, as the database read returned it.
   * @param expiresAt the row's `expires_at`.
   */
  set(principalId: string, key: string, entry: IdempotencyEntry, expiresAt: Date): void {
    if (this.#slots.ttlMs === 0 || !entry.completed) return;
    this.#slots.set(
      slotId(principalId, key),
      // Copies: the caller keeps its entry as it was, and a typed array
      // cannot be frozen.
      Object.freeze({
        ...entry,
        sha256: Buffer.from(entry.sha256),
        body: deepFreeze(structuredClone(entry.body)),
      }),
      expiresAt.getTime(),
    );
  }
}

/** Keys are UUIDs, which the database compares without case. */
function slotId(principalId: string, key: string): string {
  return `${principalId.toLowerCase()}/${key.toLowerCase()}`;
}
