/**
 * A bounded in-process cache with a time to live: at most `maxEntries`
 * entries, the least recently used one going first, each served for at
 * most `ttlMs` after it was read on a monotonic clock (a wall clock set
 * back must not stretch it) and, when it has one, never at or past its
 * own expiry on a second clock (the kernel clock, judged the way the
 * database judges it). The token cache of modules/identity and the replay
 * cache of modules/sync are built on it; what each keeps, and when it may
 * serve it, stays theirs.
 *
 * Recency is a Map's insertion order: a hit moves its entry last, so the
 * first entry is always the least recently used, and a get or a set costs
 * one Map lookup and at most one eviction.
 */

/** Options of {@link BoundedCache}. */
export interface BoundedCacheOptions<K, V> {
  /** How long an entry may be served after its read, in milliseconds; 0 keeps nothing. */
  readonly ttlMs: number;
  /** Most entries kept; the least recently used goes first. */
  readonly maxEntries: number;
  /** A monotonic clock in milliseconds; `performance.now` by default (tests pass their own). */
  readonly now?: () => number;
  /**
   * Told of every entry the cache drops by itself (over the size, stale,
   * expired or replaced by a set), so an owner keeping an index of its
   * keys can drop them there too; not told of `delete` or `clear`.
   */
  readonly onDrop?: (key: K, value: V) => void;
}

interface Slot<V> {
  readonly value: V;
  /** Served while the monotonic clock is before this, in milliseconds. */
  readonly staleAt: number;
  /** Served while the caller's clock is before this, in milliseconds. */
  readonly expiresAtMs: number;
}

/**
 * The cache. Keys are compared as a Map compares them, so a caller whose
 * keys compare without case lower-cases them first.
 *
 * @example
 * const cache = new BoundedCache<string, number>({ ttlMs: 60_000, maxEntries: 1_000 });
 * cache.set('a', 1);
 * cache.get('a'); // 1
 */
export class BoundedCache<K, V> {
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #now: () => number;
  readonly #onDrop: ((key: K, value: V) => void) | undefined;
  readonly #slots = new Map<K, Slot<V>>();

  /**
   * @param options TTL, size, the monotonic clock and the drop listener.
   * @throws RangeError when the TTL is not 0 or more, or the size not a positive integer.
   */
  constructor(options: BoundedCacheOptions<K, V>) {
    if (!(options.ttlMs >= 0)) throw new RangeError('ttlMs must be 0 or more');
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1) {
      throw new RangeError('maxEntries must be a positive integer');
    }
    this.#ttlMs = options.ttlMs;
    this.#max = options.maxEntries;
    this.#now = options.now ?? (() => performance.now());
    this.#onDrop = options.onDrop;
  }

  /** How many entries are held, stale ones not yet looked at included. */
  get size(): number {
    return this.#slots.size;
  }

  /** How long an entry may be served after its read, in milliseconds. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /**
   * The monotonic clock's time, as the cache reads it.
   *
   * @returns milliseconds on the clock given as `now`.
   */
  now(): number {
    return this.#now();
  }

  /**
   * The value kept for a key, when it may be served; a stale or expired
   * entry is dropped. A hit becomes the most recently used.
   *
   * @param key the key.
   * @param atMs the caller's clock (the one of `expiresAtMs` in `set`), in milliseconds.
   * @param monoNow the monotonic clock's time; read from `now` when not given.
   * @returns the value, or undefined when none may be served.
   */
  get(key: K, atMs = -Infinity, monoNow?: number): V | undefined {
    const slot = this.#slots.get(key);
    if (slot === undefined) return undefined;
    this.#slots.delete(key);
    if (slot.expiresAtMs <= atMs || slot.staleAt <= (monoNow ?? this.#now())) {
      this.#onDrop?.(key, slot.value);
      return undefined;
    }
    this.#slots.set(key, slot);
    return slot.value;
  }

  /**
   * Keeps a value (nothing when the TTL is 0), replacing the key's
   * earlier one and dropping the least recently used entry when full.
   *
   * @param key the key.
   * @param value the value; kept as given, so the caller copies or freezes it.
   * @param expiresAtMs the value's own expiry on the caller's clock, in milliseconds; none by default.
   * @param readAt when the value was read, on the monotonic clock; now by default.
   */
  set(key: K, value: V, expiresAtMs = Infinity, readAt?: number): void {
    if (this.#ttlMs === 0) return;
    const old = this.#slots.get(key);
    if (old !== undefined) {
      this.#slots.delete(key);
      this.#onDrop?.(key, old.value);
    }
    while (this.#slots.size >= this.#max) {
      const oldest = this.#slots.entries().next();
      if (oldest.done === true) break;
      this.#slots.delete(oldest.value[0]);
      this.#onDrop?.(oldest.value[0], oldest.value[1].value);
    }
    this.#slots.set(key, { value, staleAt: (readAt ?? this.#now()) + this.#ttlMs, expiresAtMs });
  }

  /**
   * Drops a key's entry, without telling `onDrop`.
   *
   * @param key the key.
   * @returns whether an entry was held.
   */
  delete(key: K): boolean {
    return this.#slots.delete(key);
  }

  /** Drops every entry, without telling `onDrop`. */
  clear(): void {
    this.#slots.clear();
  }
}
