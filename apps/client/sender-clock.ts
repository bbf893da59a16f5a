/**
 * What a sender knows of the server's clock and the key lifetime it tells:
 * the server's latest `Date` carried forward on the monotonic clock (a
 * key's age counts on it too), a `Date` far from the local clock as a
 * disagreement that holds intents with an attempt behind them, and the
 * lifetime in force (the server's `Idempotency-Key-Lifetime`, or the
 * caller's shorter override, warned of).
 */
import type { Intent } from './outbox.js';
import type { SenderOptions } from './sender-types.js';

/**
 * The key lifetime assumed while neither the server (no
 * `Idempotency-Key-Lifetime` header) nor the caller told one: the server's
 * default `sync.idempotency_key_ttl`, 24 hours.
 */
export const DEFAULT_KEY_TTL_MS = 24 * 3_600_000;

/**
 * What one drain learns as it goes: whether a server `Date` disagreed with
 * the local clock by more than the margin, and the intents held for it.
 */
export interface DrainState {
  /** The halt's detail, naming both times, once a `Date` disagreed. */
  disagreement?: string;
  /**
   * The halt's detail when the server's answers carried no readable `Date`
   * while no server time was known: intents with an attempt behind them are
   * held, since their age cannot be checked on the server's clock.
   */
  noServerTime?: string;
  /**
   * The halt's detail once the lifetime in force was no longer than the
   * TTL margin: every intent is held, none is failed as expired.
   */
  lifetimeTooShort?: string;
  /** The intents not sent for one of those, by sequence number. */
  readonly held: Set<number>;
  /** The intents this drain has started an attempt of, by sequence number. */
  readonly attemptedHere: Set<number>;
}

const iso = (ms: number): string => new Date(ms).toISOString();

/** A duration in the largest whole unit of the command line's: `24h`, `90m`, `1500ms`. */
function span(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${String(ms / size)}${unit}`;
  }
  return `${String(ms)}ms`;
}

/** The server's clock and key lifetime as one sender has seen them. */
export class ServerClock {
  /** The key lifetime the server told last, in milliseconds. */
  private serverLifetimeMs: number | undefined;
  /** The server lifetime last warned of, so a disagreement is told once. */
  private warnedLifetimeMs: number | undefined;
  /** The server's latest `Date` and the monotonic time it was read at. */
  private serverClock: { readonly at: number; readonly mono: number } | undefined;

  /**
   * @param options the sender's options: the override, the margin, the
   *   outbox (whose high-water mark a server `Date` raises), the warnings.
   * @param clock the local clock, in milliseconds since the epoch.
   * @param monotonic a monotonic clock in milliseconds.
   */
  constructor(
    private readonly options: SenderOptions,
    private readonly clock: () => number,
    private readonly monotonic: () => number,
  ) {}

  /**
   * The key lifetime in force: the shorter of the caller's override and
   * what the server told, either one when only it is known, else
   * {@link DEFAULT_KEY_TTL_MS}.
   *
   * @returns milliseconds.
   */
  keyLifetimeMs(): number {
    const given = this.options.keyTtlMs;
    const told = this.serverLifetimeMs;
    if (given === undefined) return told ?? DEFAULT_KEY_TTL_MS;
    return told === undefined ? given : Math.min(given, told);
  }

  /**
   * Takes in the lifetime an answer told, and warns once per value when
   * the caller's override disagrees with it.
   */
  observeLifetime(told: number | undefined): void {
    if (told === undefined) return;
    const before = this.serverLifetimeMs;
    this.serverLifetimeMs = told;
    if (told !== before && this.keyLifetimeMs() <= this.options.ttlMarginMs) {
      this.options.onWarning?.(
        `the server keeps keys for ${span(told)} (its Idempotency-Key-Lifetime), not longer than the TTL margin ${span(this.options.ttlMarginMs)} (--ttl-margin): every key counts as expired and nothing is sent; lower --ttl-margin below the lifetime`,
      );
    }
    const given = this.options.keyTtlMs;
    if (given === undefined || given === told || this.warnedLifetimeMs === told) return;
    this.warnedLifetimeMs = told;
    this.options.onWarning?.(
      `the key TTL ${span(given)} given (--key-ttl) is not what the server keeps keys for, ${span(told)} (its Idempotency-Key-Lifetime): the shorter, ${span(Math.min(given, told))}, is used; drop --key-ttl to follow the server`,
    );
  }

  /**
   * Takes in a server's `Date`: the high-water mark and the server's clock.
   * A `Date` more than the TTL margin ahead of the local clock is ignored:
   * one absurd date (a gateway's year 9999) would otherwise raise the
   * mark for good and expire every intent, new ones too. A `Date` more than
   * the margin from the local clock, either way, is a disagreement:
   * one of the clocks is wrong, and which one is not known, so no intent
   * with an attempt behind it is sent again in this drain.
   */
  observeServer(serverTime: number | undefined, state: DrainState): void {
    if (serverTime === undefined) {
      if (this.serverClock === undefined) {
        state.noServerTime ??=
          'the server sent no readable Date (an IMF-fixdate), so the age of a key sent before cannot be checked on its clock: no intent with an attempt behind it is sent; drain again once the server (or the gateway in front of it) sends Date';
      }
      return;
    }
    const local = this.clock();
    if (Math.abs(serverTime - local) > this.options.ttlMarginMs) {
      state.disagreement ??= `the server's Date says ${iso(serverTime)} and the local clock ${iso(local)}, more than the TTL margin (${String(this.options.ttlMarginMs)}ms) apart: the age of a key sent before is not known, so no intent is sent; fix the clock, then drain again`;
    }
    if (serverTime > local + this.options.ttlMarginMs) return;
    this.options.outbox.observeTime(serverTime);
    this.serverClock = { at: serverTime, mono: this.monotonic() };
  }

  /**
   * Whether an intent is held for the clocks: every intent while a server
   * `Date` of this drain disagreed with the local clock (an intent with no
   * attempt in this outbox may still have been sent: a restored copy of
   * the outbox, or a key the caller sent before); an intent with an
   * attempt behind it (counted, or cut off) from before this drain while no
   * server time is known (its age cannot be checked on the server clock;
   * one attempted in this drain is as old as the drain).
   */
  hold(intent: Intent, state: DrainState): boolean {
    const attempted =
      (intent.attempts > 0 || intent.attemptStartedAt !== null) &&
      !state.attemptedHere.has(intent.seq);
    const unknown = state.noServerTime !== undefined && this.serverClock === undefined;
    if (state.disagreement === undefined && !(unknown && attempted)) return false;
    state.held.add(intent.seq);
    return true;
  }

  serverNow(): number | undefined {
    const seen = this.serverClock;
    return seen === undefined ? undefined : seen.at + Math.max(0, this.monotonic() - seen.mono);
  }
}
