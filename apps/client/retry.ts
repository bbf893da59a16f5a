/**
 * The client's retry policy, from "How to retry" in docs/api/README.md: which
 * answers are final, which are repeated with the same key, which are a bug of
 * the caller, and how long to wait before a repeat (jittered exponential
 * backoff that honours `Retry-After`). Pure functions: the clock and the
 * random source are parameters, so tests control both.
 */
import { STORED_ERRORS } from './api-types.js';

/** How an answer (or its absence) decides the fate of an intent. */
export type AnswerClass =
  /**
   * A 2xx or a final error the server stores, marked as the key's answer
   * (`Idempotent-Replay`): record it and hand it to the caller.
   */
  | { readonly kind: 'final' }
  /**
   * A 2xx or a status the server stores, without `Idempotent-Replay`: not
   * the key's answer (the server marks every answer it stores; a gateway
   * may have replaced a committed one), so not final: repeat once with the
   * same key after a delay.
   */
  | {
      readonly kind: 'unmarked';
      /** Status and problem code, e.g. `404 not_found`, for the record. */
      readonly reason: string;
    }
  /** Not stored by the server: repeat with the same key after a delay. */
  | {
      readonly kind: 'retry';
      /** Status and problem code, e.g. `409 request_in_progress`, for the record. */
      readonly reason: string;
      /** What `Retry-After` asked for, in milliseconds, when it was readable. */
      readonly retryAfterMs: number | undefined;
    }
  /** `422 idempotency_key_reuse`: the key was used for another request, a bug of the caller. */
  | { readonly kind: 'key_reuse' }
  /** `401`: nothing is stored; the intent waits for a valid token. */
  | { readonly kind: 'unauthenticated' }
  /**
   * An answer the API never gives to this request (3xx, 405, 428, ...),
   * while no earlier attempt may have reached the server: not repeated.
   */
  | { readonly kind: 'unexpected'; readonly reason: string }
  /**
   * Whether an attempt took effect is not known, so the intent is not
   * repeated again and a person must check: a 2xx or a status the server
   * stores, without `Idempotent-Replay`, for the second time in a row (a
   * gateway's, or a refusal before the key was looked up); or an answer the
   * API never gives to this request after an earlier attempt that may have
   * reached the server (the earlier one may have taken effect, and this
   * answer does not say).
   */
  | { readonly kind: 'outcome_unknown'; readonly reason: string };

/** What {@link classifyAnswer} reads from an HTTP answer. */
export interface AnswerFacts {
  /** The HTTP status. */
  readonly status: number;
  /** The problem body's `code`, when the body is a problem. */
  readonly code?: string | undefined;
  /** The raw `Retry-After` header, or null. */
  readonly retryAfter?: string | null;
  /**
   * Whether the answer carried `Idempotent-Replay` (`true` or `false`), the
   * mark of the key's stored answer; default false.
   */
  readonly marked?: boolean;
  /**
   * Whether the intent's previous answer was already an unmarked 2xx or
   * stored status (its one repeat was for that); default false.
   */
  readonly previousUnmarked?: boolean;
  /**
   * Whether an earlier attempt of the intent may have reached the server
   * (one was counted before this one: cut off, timed out, lost, or answered
   * with something that was not the key's answer); default false. Then
   * only a marked final answer settles the intent, and an answer the API
   * never gives is `outcome_unknown`, never `unexpected`.
   */
  readonly mayHaveReached?: boolean;
}

/**
 * The error statuses the server stores under a key and replays (docs/api,
 * "Which answers are stored"), apart from `409 request_in_progress` and
 * `422 idempotency_key_reuse`, which {@link classifyAnswer} treats on their
 * own: read from the API document (api-types.ts), where the server writes
 * the list it applies, so the two cannot drift apart.
 */
export const STORED_ERROR_STATUSES: ReadonlySet<number> = new Set(STORED_ERRORS);

/**
 * Decides what an answer means for the intent that got it. A 2xx or an
 * error of the statuses the server stores is final only when it is marked
 * as the key's answer (`Idempotent-Replay`): the server marks every answer
 * it stores, so an unmarked one is not the key's, even on the first
 * attempt (a response-side gateway may have replaced a committed 201). An
 * unmarked one is `unmarked` (repeat once with the same key), or
 * `outcome_unknown` when the previous answer was unmarked too. An answer
 * the API never gives to a keyed write (3xx, 405, 428, 431, ...) is
 * `unexpected` on a first attempt and `outcome_unknown` once an earlier
 * attempt may have reached the server: it says nothing of whether that one
 * took effect, so it must never read as a plain failure that invites
 * stating the intent again.
 *
 * @param answer the status, the problem code, the `Retry-After` header,
 *   whether the answer is marked, whether the previous one was unmarked and
 *   whether an earlier attempt may have reached the server.
 * @param now the current time in milliseconds since the epoch (for an
 *   HTTP-date `Retry-After`).
 * @returns the class of the answer.
 */
export function classifyAnswer(answer: AnswerFacts, now: number): AnswerClass {
  const { status, code } = answer;
  const reason = code === undefined ? String(status) : `${String(status)} ${code}`;
  const stored = (): AnswerClass => {
    if (answer.marked === true) return { kind: 'final' };
    return answer.previousUnmarked === true
      ? { kind: 'outcome_unknown', reason }
      : { kind: 'unmarked', reason };
  };
  if (status >= 200 && status < 300) return stored();
  if (status === 422 && code === 'idempotency_key_reuse') return { kind: 'key_reuse' };
  const retry = (): AnswerClass => ({
    kind: 'retry',
    reason,
    retryAfterMs: parseRetryAfter(answer.retryAfter ?? null, now),
  });
  if (status === 409 && code === 'request_in_progress') return retry();
  if (status === 408 || status === 429 || status >= 500) return retry();
  if (status === 401) return { kind: 'unauthenticated' };
  if (STORED_ERROR_STATUSES.has(status)) return stored();
  return answer.mayHaveReached === true
    ? { kind: 'outcome_unknown', reason }
    : { kind: 'unexpected', reason };
}

const DELTA_SECONDS = /^\d+$/;
/** RFC 9110 HTTP-date in its preferred form, IMF-fixdate. */
const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;

/**
 * Reads a `Retry-After` header (RFC 9110 section 10.2.3): delta-seconds or an
 * HTTP-date.
 *
 * @param value the header's value, or null when absent.
 * @param now the current time in milliseconds since the epoch.
 * @returns the wait in milliseconds (0 for a date in the past), or undefined
 *   when the header is absent or not in either form.
 */
export function parseRetryAfter(value: string | null, now: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (DELTA_SECONDS.test(text)) return Number(text) * 1_000;
  const at = parseHttpDate(text);
  return at === undefined ? undefined : Math.max(0, at - now);
}

/**
 * Reads an HTTP-date in its preferred form, IMF-fixdate (RFC 9110 section
 * 5.6.7), as in `Date` and `Retry-After`.
 *
 * @param value the header's value, or null when absent.
 * @returns milliseconds since the epoch, or undefined when absent or not an IMF-fixdate.
 */
export function parseHttpDate(value: string | null): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (!IMF_FIXDATE.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : at;
}

/** The shape of the backoff. */
export interface BackoffSettings {
  /** The first step, in milliseconds; each later step doubles. */
  readonly baseMs: number;
  /** The largest step, in milliseconds. */
  readonly capMs: number;
  /** The longest `Retry-After` obeyed, in milliseconds (a longer one is cut to this). */
  readonly maxRetryAfterMs: number;
}

/**
 * The wait before the next attempt: exponential steps (`baseMs`, doubled per
 * failed attempt, at most `capMs`) with equal jitter (half the step fixed,
 * half drawn), so repeating clients spread out without ever retrying at
 * once; never shorter than what `Retry-After` asked for (bounded by
 * `maxRetryAfterMs`).
 *
 * @param attempt how many attempts have failed so far, from 1.
 * @param settings the backoff's shape.
 * @param random a source of numbers in [0, 1), e.g. `Math.random`.
 * @param retryAfterMs what the server's `Retry-After` asked for, if anything.
 * @returns the delay in whole milliseconds.
 * @throws RangeError when `attempt` is not a positive integer.
 */
export function backoffDelay(
  attempt: number,
  settings: BackoffSettings,
  random: () => number,
  retryAfterMs?: number,
): number {
  if (!Number.isInteger(attempt) || attempt < 1) {
    throw new RangeError(`attempt must be a positive integer, got ${String(attempt)}`);
  }
  const step = Math.min(settings.capMs, settings.baseMs * 2 ** Math.min(attempt - 1, 52));
  const jittered = Math.round(step / 2 + (random() * step) / 2);
  const asked = retryAfterMs === undefined ? 0 : Math.min(retryAfterMs, settings.maxRetryAfterMs);
  return Math.max(jittered, asked);
}
