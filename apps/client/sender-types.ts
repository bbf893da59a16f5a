/**
 * The sender's options, its events and what a drain reports: the types a
 * caller of the sender (sender.ts) meets, in a module of their own so the
 * drain, the attempt, the transport and the server clock share them.
 */
import type { Intent, Outbox } from './outbox.js';
import type { BackoffSettings } from './retry.js';

/** How a sender reaches the server and paces its attempts. */
export interface SenderOptions {
  /** The outbox to drain (open; the sender does not close it). */
  readonly outbox: Outbox;
  /** The server's origin, e.g. `http://127.0.0.1:3000` (no path, query or fragment). */
  readonly baseUrl: string;
  /** The bearer token. */
  readonly token: string;
  /**
   * How long the server keeps a key, in milliseconds: an override of what
   * the server tells in `Idempotency-Key-Lifetime` (on `GET /api/v1/me`,
   * asked before the first send, and on every keyed answer). The shorter
   * of the two is in force, so an override never makes the client send a
   * key the server has forgotten; a disagreement is a `warning` event.
   * Default: the server's, or {@link DEFAULT_KEY_TTL_MS} while the server
   * has told none.
   */
  readonly keyTtlMs?: number;
  /**
   * How much earlier than the TTL the client stops sending a key, in
   * milliseconds: it covers clock skew and the last attempt's travel, so it
   * must exceed `timeoutMs`.
   */
  readonly ttlMarginMs: number;
  /** How long one attempt may take, answer body included, in milliseconds. */
  readonly timeoutMs: number;
  /** How many intents (of different lanes) may be in flight at once. */
  readonly concurrency: number;
  /** The backoff between attempts of one intent. */
  readonly backoff: BackoffSettings;
  /** The clock, in milliseconds since the epoch; default `Date.now`. */
  readonly clock?: () => number;
  /**
   * A monotonic clock in milliseconds (any origin), which carries the
   * server's last `Date` forward; default `performance.now`.
   */
  readonly monotonic?: () => number;
  /** Random numbers in [0, 1) for the jitter; default `Math.random`. */
  readonly random?: () => number;
  /** Waits `ms`, rejecting when the signal aborts; default a timer. */
  readonly sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  /** Receives progress events as they happen. */
  readonly onEvent?: (event: SendEvent) => void;
  /**
   * Receives, in one line, what the caller should know and fix while
   * sending goes on: the key lifetime given (`keyTtlMs`) is not the one the
   * server tells. Default: none. `LedgerClient.open` gives it to the
   * outbox too, which tells it when its file system keeps no modes.
   */
  readonly onWarning?: (detail: string) => void;
}

/** What a drain reports as it goes. */
export type SendEvent =
  /** The token's principal is known and the outbox is bound to it. */
  | { readonly type: 'principal'; readonly principalId: string }
  /** An attempt starts. */
  | {
      readonly type: 'attempt';
      readonly key: string;
      readonly seq: number;
      readonly operation: string;
      readonly attempt: number;
    }
  /** An attempt met something to repeat after `delayMs` (key null: the principal check). */
  | {
      readonly type: 'retry';
      readonly key: string | null;
      readonly seq: number | null;
      readonly operation: string;
      readonly attempt: number;
      readonly error: string;
      readonly delayMs: number;
    }
  /**
   * An intent reached its final state: done, or failed by key reuse, an
   * unexpected answer or an unknown outcome.
   */
  | { readonly type: 'settled'; readonly intent: Intent }
  /** An intent's key is too old to send; it is failed as expired, not sent. */
  | { readonly type: 'expired'; readonly intent: Intent; readonly ageMs: number }
  /** The drain stops for something only a person can fix. */
  | {
      readonly type: 'halted';
      readonly reason:
        'unauthenticated' | 'unexpected_answer' | 'clock_disagreement' | 'key_lifetime_too_short';
      readonly detail: string;
    };

/** Why a drain ended. */
export type StopReason =
  /** Nothing is pending any more. */
  | 'empty'
  /** The target intent reached its final state. */
  | 'target'
  /** The deadline came with intents still pending. */
  | 'deadline'
  /** The signal aborted. */
  | 'aborted'
  /** The server refused the token (401): intents wait for a good one. */
  | 'unauthenticated'
  /** `GET /api/v1/me` gave an answer the API does not give. */
  | 'unexpected_answer'
  /**
   * A server `Date` and the local clock disagreed by more than the TTL
   * margin: intents with an attempt behind them were held, not sent (a
   * key's age is not known while the clocks disagree), until a person fixes
   * the clock. Intents never attempted were sent as usual.
   */
  | 'clock_disagreement'
  /**
   * The server said it keeps keys no longer than the TTL margin (its
   * `Idempotency-Key-Lifetime`, or `--key-ttl`): every key would count as
   * expired. Nothing was sent and nothing failed: the intents stay
   * pending, since one short header (a gateway's, a misconfiguration) must
   * not fail for good what the server could still deliver or replay.
   */
  | 'key_lifetime_too_short';

/** What a drain did. */
export interface DrainReport {
  /** The intents that reached a final state in this drain, in the order they did. */
  readonly settled: readonly Intent[];
  /** How many intents are still pending. */
  readonly pending: number;
  /** Why it ended. */
  readonly stoppedBy: StopReason;
  /** For a halt, what the server said. */
  readonly halt?: string;
  /**
   * When the drain ended (the deadline, the signal) before the server
   * answered `GET /api/v1/me`: what the last try met, e.g.
   * `ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:3000`. Nothing was sent.
   */
  readonly unreached?: string;
}

/** Options of one drain. */
export interface DrainOptions {
  /** Start no attempt at or after this time (milliseconds since the epoch); default: none. */
  readonly deadline?: number;
  /**
   * Stop when this aborts: attempts in flight are abandoned, counted as
   * attempts (their bytes may have left), and their intents stay pending.
   */
  readonly signal?: AbortSignal;
  /** Stop as soon as the intent with this key reaches a final state. */
  readonly target?: string;
  /**
   * Ask `GET /api/v1/me` even when nothing is pending, so a wrong URL or
   * token is found before anything is stated (`outbox drain` does);
   * default false: a drain with nothing pending sends nothing.
   */
  readonly checkWhenEmpty?: boolean;
}
