/**
 * An in-process cache of token lookups: the SHA-256 of a presented token to
 * the owner the database named for it, so a request need not read
 * api_tokens each time. It serves an entry only while it can trust it:
 *
 * - while the change feed is live (a database listener that is told of
 *   every revocation, removal and disabling, see migration 000006); while
 *   it is down every lookup goes to the database, and when it comes back
 *   every entry is dropped, since changes made meanwhile were not heard;
 * - for at most the TTL since the entry was read (a bound on staleness
 *   should the feed fail without the session noticing), measured on a
 *   monotonic clock, and never past the token's own expiry, judged on the
 *   kernel clock as the database judges it;
 * - only if no change was heard between the start of its read and the
 *   store: a read that saw a token before its revocation committed, and
 *   returns after the notice, is not kept. A counter moves on with every
 *   change; each principal remembers the count of its last change, and the
 *   feed going up or down that of the last reset, so a notice for one
 *   principal does not keep another's reads from being stored;
 * - only if its principal is not held back: a change made inside an outer
 *   unit of work is not committed when the service drops the entries, so a
 *   read in between still sees the old rows. {@link TokenOwnerCache.suppress}
 *   keeps the principal's reads from being stored until the notice for it
 *   arrives (sent on the commit) or {@link SUPPRESS_MS} pass.
 *
 * Only usable tokens are kept; an unknown, revoked or expired token is read
 * from the database each time (the rate limit bounds how often). Entries
 * are keyed by the token's hash, never the token itself; an index from
 * each principal to its keys lets a notice drop them without a scan. The
 * entries, their size bound and their TTL are kernel/cache's.
 */
import { BoundedCache } from '../../../kernel/cache/index.js';
import type { Id } from '../../../kernel/ids/index.js';
import type { TokenOwner } from './ports.js';

/** The PostgreSQL channel the identity triggers notify (migration 000006). */
export const CREDENTIALS_CHANNEL = 'identity_credentials';

/**
 * Where the module hears of credential changes: the composition root
 * connects a database listener on {@link CREDENTIALS_CHANNEL} to it. Until
 * `setLive(true)` the token cache serves nothing.
 */
export interface CredentialFeed {
  /** The channel to listen on. */
  readonly channel: string;
  /**
   * A notice arrived: the principal it names has a credential that changed.
   *
   * @param payload the notice's payload, the principal's id.
   */
  notify(payload: string): void;
  /**
   * The listener started or stopped listening; either way the cache is emptied.
   *
   * @param live whether it listens now.
   */
  setLive(live: boolean): void;
}

/** How long {@link TokenOwnerCache.suppress} holds a principal back at most, in milliseconds. */
export const SUPPRESS_MS = 1_000;

/** Options of {@link TokenOwnerCache}. */
export interface TokenCacheOptions {
  /** How long an entry may be served after its read, in milliseconds; 0 turns the cache off. */
  readonly ttlMs: number;
  /** Most entries kept; the least recently used goes first. */
  readonly maxEntries: number;
  /** A monotonic clock in milliseconds; `performance.now` by default (tests pass their own). */
  readonly now?: () => number;
}

interface Entry {
  readonly tokenId: TokenOwner['tokenId'];
  readonly principalId: TokenOwner['principalId'];
  readonly principalKind: TokenOwner['principalKind'];
  /** The token's expiry on the kernel clock, in milliseconds; null when it does not expire. */
  readonly expiresAtMs: number | null;
}

/** The cache; see the module comment for when it serves an entry. */
export class TokenOwnerCache {
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #entries: BoundedCache<string, Entry>;
  readonly #now: () => number;
  /** Principals whose reads are not stored, until this monotonic time. */
  readonly #suppressed = new Map<string, number>();
  /** The keys of each principal's entries. */
  readonly #byPrincipal = new Map<string, Set<string>>();
  /** The count of the last change of each principal, kept while a read is out. */
  readonly #changedAt = new Map<string, number>();
  #live = false;
  /** Moves on with every change heard and every reset. */
  #counter = 0;
  /** The count of the last reset: no read that began before it is stored. */
  #resetAt = 0;
  /** Reads under way; when none is, the per-principal counts are forgotten. */
  #reading = 0;

  /**
   * @param options TTL and size.
   * @throws RangeError when the TTL is negative or the size is not a positive integer.
   */
  constructor(options: TokenCacheOptions) {
    this.#entries = new BoundedCache<string, Entry>({
      ...options,
      // An entry the cache drops by itself (stale, expired, over the size,
      // replaced) leaves its principal's index too.
      onDrop: (key, entry) => {
        this.#unindex(key, entry.principalId);
      },
    });
    this.#ttlMs = options.ttlMs;
    this.#max = options.maxEntries;
    this.#now = () => this.#entries.now();
  }

  /** How many entries are held. */
  get size(): number {
    return this.#entries.size;
  }

  /** Whether entries are served: the feed is live and the TTL is above 0. */
  get serving(): boolean {
    return this.#live && this.#ttlMs > 0;
  }

  /**
   * Looks a token up, from the cache when an entry may be served, else
   * through `load` (whose usable answer is then kept).
   *
   * @param sha256 SHA-256 of the whole presented token.
   * @param now the kernel clock's time.
   * @param load reads the owner of a usable token from the database.
   * @returns the owner, or null for a token that is not usable.
   * @throws what `load` throws.
   */
  async lookup(
    sha256: Buffer,
    now: Date,
    load: () => Promise<TokenOwner | null>,
  ): Promise<TokenOwner | null> {
    if (!this.serving) return load();
    const key = sha256.toString('base64');
    const readAt = this.#now();
    // The TTL on the monotonic clock (a kernel clock set back must not
    // stretch it), the token's expiry on the kernel clock, as the database
    // judges it.
    const hit = this.#entries.get(key, now.getTime(), readAt);
    if (hit !== undefined) {
      return {
        tokenId: hit.tokenId,
        principalId: hit.principalId,
        principalKind: hit.principalKind,
        // A Date of its own for each caller: one changing it changes no other.
        expiresAt: hit.expiresAtMs === null ? null : new Date(hit.expiresAtMs),
      };
    }
    const start = this.#counter;
    this.#reading += 1;
    let owner: TokenOwner | null;
    try {
      owner = await load();
    } finally {
      this.#reading -= 1;
    }
    if (owner !== null && this.#mayStore(owner.principalId, start)) {
      this.#put(
        key,
        {
          tokenId: owner.tokenId,
          principalId: owner.principalId,
          principalKind: owner.principalKind,
          expiresAtMs: owner.expiresAt === null ? null : owner.expiresAt.getTime(),
        },
        readAt,
      );
    }
    if (this.#reading === 0) this.#changedAt.clear();
    return owner;
  }

  /** No change of the principal, nor reset, since `start`, and the principal is not held back. */
  #mayStore(principalId: string, start: number): boolean {
    if (!this.serving || this.#resetAt > start) return false;
    if ((this.#changedAt.get(principalId) ?? 0) > start) return false;
    return !this.#isSuppressed(principalId);
  }

  #put(key: string, entry: Entry, readAt: number): void {
    // The replaced entry and the one evicted leave the index through onDrop.
    this.#entries.set(key, entry, entry.expiresAtMs ?? Infinity, readAt);
    const id = entry.principalId;
    let keys = this.#byPrincipal.get(id);
    if (keys === undefined) {
      keys = new Set();
      this.#byPrincipal.set(id, keys);
    }
    keys.add(key);
  }

  #unindex(key: string, principalId: string): void {
    const keys = this.#byPrincipal.get(principalId);
    if (keys === undefined) return;
    keys.delete(key);
    if (keys.size === 0) this.#byPrincipal.delete(principalId);
  }

  /**
   * A notice arrived on the feed. A listener heartbeat (`hb:<instance>:<seq>`,
   * see platform/pg/listener.ts) names no principal and is ignored; any
   * other payload is a principal's id, see {@link invalidatePrincipal}; it
   * also ends a {@link suppress} of that principal (its commit was heard).
   *
   * @param payload the notice's payload.
   */
  notice(payload: string): void {
    if (payload.startsWith('hb:')) return;
    this.#suppressed.delete(payload);
    this.invalidatePrincipal(payload);
  }

  /**
   * A credential of a principal changed (a token revoked or removed, the
   * principal disabled, removed or changed): drops its entries, and keeps
   * any read already under way from being stored.
   *
   * @param principalId the principal the change notice named.
   */
  invalidatePrincipal(principalId: Id | string): void {
    this.#counter += 1;
    if (this.#reading > 0) {
      // Bounded: past the cache's size, forget them all and refuse every
      // read under way instead (a reset), which is never wrong.
      if (this.#changedAt.size >= this.#max) {
        this.#changedAt.clear();
        this.#resetAt = this.#counter;
      } else {
        this.#changedAt.set(principalId, this.#counter);
      }
    }
    const keys = this.#byPrincipal.get(principalId);
    if (keys === undefined) return;
    this.#byPrincipal.delete(principalId);
    for (const key of keys) this.#entries.delete(key);
  }

  /**
   * A credential of a principal is changing in a transaction not committed
   * yet (the service is inside an outer unit of work): drops its entries now
   * and stores none of its reads until the notice for it arrives (the
   * trigger sends it on the commit) or {@link SUPPRESS_MS} pass, so a read
   * that sees the rows before the commit is not kept after it.
   *
   * @param principalId the principal whose credential changes.
   */
  suppress(principalId: Id | string): void {
    this.#suppressed.set(principalId, this.#now() + SUPPRESS_MS);
    this.invalidatePrincipal(principalId);
  }

  #isSuppressed(principalId: string): boolean {
    const until = this.#suppressed.get(principalId);
    if (until === undefined) return false;
    if (this.#now() < until) return true;
    this.#suppressed.delete(principalId);
    return false;
  }

  /**
   * The change feed went up or down. Either way every entry is dropped:
   * changes made while it was down were not heard.
   *
   * @param live whether the feed is listening now.
   */
  setLive(live: boolean): void {
    this.#live = live;
    this.#counter += 1;
    this.#resetAt = this.#counter;
    this.#changedAt.clear();
    this.#entries.clear();
    this.#byPrincipal.clear();
  }
}
