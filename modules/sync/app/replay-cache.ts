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
 * fingerprints copied, so no caller can change what a later replay sends. The least recently used entry goes first.
 */
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

interface Slot {
  readonly entry: IdempotencyEntry;
  /** The row's expiry on the kernel clock, in milliseconds. */
  readonly expiresAtMs: number;
  /** Served while the monotonic clock is before this, in milliseconds. */
  readonly staleAt: number;
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
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #now: () => number;
  readonly #slots = new Map<string, Slot>();

  /**
   * @param options TTL and size.
   * @throws RangeError when the TTL is not 0 or more, or the size not a positive integer.
   */
  constructor(options: ReplayCacheOptions) {
    if (!(options.ttlMs >= 0)) throw new RangeError('ttlMs must be 0 or more');
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1) {
      throw new RangeError('maxEntries must be a positive integer');
    }
    this.#ttlMs = options.ttlMs;
    this.#max = options.maxEntries;
    this.#now = options.now ?? (() => performance.now());
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
    const id = slotId(principalId, key);
    const slot = this.#slots.get(id);
    if (slot === undefined) return undefined;
    if (slot.expiresAtMs <= now.getTime() || slot.staleAt <= this.#now()) {
      this.#slots.delete(id);
      return undefined;
    }
    // Most recently used last: a Map iterates in insertion order.
    this.#slots.delete(id);
    this.#slots.set(id, slot);
    return slot.entry;
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
    if (this.#ttlMs === 0 || !entry.completed) return;
    const id = slotId(principalId, key);
    this.#slots.delete(id);
    while (this.#slots.size >= this.#max) {
      const oldest = this.#slots.keys().next();
      if (oldest.done === true) break;
      this.#slots.delete(oldest.value);
    }
    this.#slots.set(id, {
      // Copies: the caller keeps its entry as it was, and a typed array
      // cannot be frozen.
      entry: Object.freeze({
        ...entry,
        sha256: Buffer.from(entry.sha256),
        body: deepFreeze(structuredClone(entry.body)),
      }),
      expiresAtMs: expiresAt.getTime(),
      staleAt: this.#now() + this.#ttlMs,
    });
  }
}

/** Keys are UUIDs, which the database compares without case. */
function slotId(principalId: string, key: string): string {
  return `${principalId.toLowerCase()}/${key.toLowerCase()}`;
}
