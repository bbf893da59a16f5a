/**
 * The sender: drains an outbox over HTTP. It sends each pending intent with
 * its own key, one at a time per lane in the order stated (intents of other
 * lanes in parallel, up to a concurrency), repeats what the retry policy
 * (retry.ts) says to repeat with the same key and the same bytes, records
 * every final answer in the outbox before handing it on, repeats once an
 * answer not marked as the key's (a 2xx or a stored status without
 * `Idempotent-Replay`) and fails as `outcome_unknown` a second one in a
 * row, and never sends a
 * key older than the server keeps keys (less a margin): such an intent is
 * reported as expired instead, because the server would run it again as new.
 * A key's age counts up to the latest time the outbox has seen (its own
 * records and the server's `Date`), not the clock alone, which may step back;
 * and it counts on the server's clock too (its latest `Date` carried forward
 * on the monotonic clock, less the server's time seen before the intent's
 * first attempt), so a client clock that was ahead when the intent was
 * stated does not make its key look young once corrected. The key expires
 * when either age reaches the TTL less the margin. A server `Date` more than
 * the margin from the local clock, either way, halts the sending of every
 * intent with an attempt behind it in that drain (neither age can then be
 * trusted); intents never attempted are still sent.
 *
 * Each drain first asks `GET /api/v1/me` who the token belongs to (which
 * also gives the server's time before anything is sent or sent again) and
 * binds the outbox to that principal (keys are per principal: another
 * principal's repeat of a key would run as a new request).
 */
import { setTimeout as delay } from 'node:timers/promises';
import {
  keyTime,
  Outbox,
  OutboxCorruptError,
  OutboxError,
  type FailureReason,
  type Intent,
  type RecordedAnswer,
} from './outbox.js';
import { backoffDelay, classifyAnswer, parseHttpDate, type BackoffSettings } from './retry.js';

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
   * server tells. Default: none.
   */
  readonly onWarning?: (detail: string) => void;
  /** The fetch implementation; default the global fetch. */
  readonly fetch?: typeof fetch;
}

/**
 * The key lifetime assumed while neither the server (no
 * `Idempotency-Key-Lifetime` header) nor the caller told one: the server's
 * default `sync.idempotency_key_ttl`, 24 hours.
 */
export const DEFAULT_KEY_TTL_MS = 24 * 3_600_000;

/** The header in which the server tells how long it keeps a key, in whole seconds. */
const KEY_LIFETIME_HEADER = 'idempotency-key-lifetime';

/**
 * Reads `Idempotency-Key-Lifetime`: whole seconds (an RFC 8941 integer).
 *
 * @returns milliseconds, or undefined when absent or not an integer.
 */
function parseKeyLifetime(value: string | null): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (!/^\d{1,15}$/.test(text)) return undefined;
  return Number(text) * 1_000;
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
      readonly reason: 'unauthenticated' | 'unexpected_answer' | 'clock_disagreement';
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
  | 'clock_disagreement';

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
}

/**
 * What one drain learns as it goes: whether a server `Date` disagreed with
 * the local clock by more than the margin, and the intents held for it.
 */
interface DrainState {
  /** The halt's detail, naming both times, once a `Date` disagreed. */
  disagreement?: string;
  /**
   * The halt's detail when the server's answers carried no readable `Date`
   * while no server time was known: intents with an attempt behind them are
   * held, since their age cannot be checked on the server's clock (R2).
   */
  noServerTime?: string;
  /** The intents not sent for it, by sequence number. */
  readonly held: Set<number>;
  /** The intents this drain has started an attempt of, by sequence number. */
  readonly attemptedHere: Set<number>;
}

/** An answer as read off the wire. */
interface WireAnswer extends RecordedAnswer {
  /** Whether the body was larger than {@link MAX_BODY_BYTES}; its text is then empty. */
  readonly oversize: boolean;
  /** The server's `Date`, when it sent a readable one. */
  readonly serverTime: number | undefined;
  /** The key lifetime the answer told (`Idempotency-Key-Lifetime`), in milliseconds. */
  readonly keyLifetimeMs: number | undefined;
  /** Read off the wire, the marker is always known. */
  readonly marked: boolean;
  readonly retryAfter: string | null;
  readonly code: string | undefined;
}

/** How the last error of an intent whose answer was unmarked starts, for people reading it. */
const UNMARKED = 'unmarked answer: ';

/**
 * The largest answer body read, in bytes: no answer of this API comes near
 * it, and a larger one (a gateway's, a misrouted download) is not read
 * whole into memory and the outbox (L1).
 */
export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * Reads a body up to {@link MAX_BODY_BYTES}, cancelling the rest.
 *
 * @returns its text, or an empty text and `oversize` when it is larger.
 */
async function readBody(res: Response): Promise<{ text: string; oversize: boolean }> {
  if (res.body === null) return { text: '', oversize: false };
  const reader: ReadableStreamDefaultReader<Uint8Array> = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_BODY_BYTES) {
      await reader.cancel();
      return { text: '', oversize: true };
    }
    chunks.push(value);
  }
  return { text: Buffer.concat(chunks).toString('utf8'), oversize: false };
}

/**
 * The last error of an intent whose final answer had a body over
 * {@link MAX_BODY_BYTES}: its recorded body is empty.
 */
export const OVERSIZE_NOTE = `the answer body is over ${String(MAX_BODY_BYTES)} bytes, not kept`;

/** The headers an answer is recorded with. */
const KEPT_HEADERS = ['location', 'etag', 'content-type', 'correlation-id'];

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

const defaultSleep = (ms: number, signal: AbortSignal): Promise<void> =>
  delay(ms, undefined, { signal });

function describeError(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && err.name === 'TimeoutError') {
    return `timeout after ${String(timeoutMs)}ms`;
  }
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  const code = typeof cause?.code === 'string' ? cause.code : undefined;
  const text = typeof cause?.message === 'string' ? cause.message : String(err);
  if (
    code === 'UND_ERR_SOCKET' ||
    code === 'ECONNRESET' ||
    code === 'EPIPE' ||
    /other side closed|socket hang up/i.test(text)
  ) {
    return `connection lost: ${text}`;
  }
  return code === undefined ? text : `${code}: ${text}`;
}

function principalId(body: string): string | undefined {
  try {
    const value = JSON.parse(body) as { id?: unknown } | null;
    return typeof value?.id === 'string' ? value.id : undefined;
  } catch {
    return undefined;
  }
}

function problemCode(body: string): string | undefined {
  try {
    const value = JSON.parse(body) as unknown;
    if (typeof value === 'object' && value !== null && 'code' in value) {
      const { code } = value;
      return typeof code === 'string' ? code : undefined;
    }
  } catch {
    // not JSON: no problem code
  }
  return undefined;
}

/** Drains an outbox; one sender per outbox and token. */
export class Sender {
  private readonly clock: () => number;
  private readonly random: () => number;
  private readonly sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  private readonly fetch: typeof fetch;
  private readonly monotonic: () => number;
  private readonly origin: URL;
  /** The key lifetime the server told last, in milliseconds. */
  private serverLifetimeMs: number | undefined;
  /** The server lifetime last warned of, so a disagreement is told once. */
  private warnedLifetimeMs: number | undefined;
  /** The server's latest `Date` and the monotonic time it was read at. */
  private serverClock: { readonly at: number; readonly mono: number } | undefined;
  /**
   * Attempts in flight, by intent, shared by every drain of this sender:
   * two drains at once (two `deliver` calls) never send one intent twice at
   * once nor record its answer twice (review: both rejected).
   */
  private readonly inFlight = new Map<number, Promise<void>>();

  /**
   * @param options the outbox, the server, the TTL and the pacing.
   * @throws RangeError for a base URL that is not an http(s) origin, an empty
   *   token, a margin not below the TTL, a timeout not below the margin, or a
   *   concurrency below 1.
   */
  constructor(private readonly options: SenderOptions) {
    let origin: URL | undefined;
    try {
      origin = new URL(options.baseUrl);
    } catch {
      origin = undefined;
    }
    if (
      origin === undefined ||
      (origin.protocol !== 'http:' && origin.protocol !== 'https:') ||
      origin.pathname !== '/' ||
      origin.search !== '' ||
      origin.hash !== ''
    ) {
      throw new RangeError(
        `baseUrl must be an http or https origin without path, query or fragment, got "${options.baseUrl}"`,
      );
    }
    if (options.token === '') throw new RangeError('token must not be empty');
    if (options.keyTtlMs !== undefined && !(options.ttlMarginMs < options.keyTtlMs)) {
      throw new RangeError('ttlMarginMs must be less than keyTtlMs');
    }
    if (!(options.timeoutMs < options.ttlMarginMs)) {
      throw new RangeError(
        'timeoutMs must be less than ttlMarginMs (the last attempt must arrive before the key can expire)',
      );
    }
    if (!Number.isInteger(options.concurrency) || options.concurrency < 1) {
      throw new RangeError('concurrency must be an integer of at least 1');
    }
    this.origin = origin;
    this.clock = options.clock ?? Date.now;
    this.monotonic = options.monotonic ?? (() => performance.now());
    this.random = options.random ?? Math.random;
    this.sleep = options.sleep ?? defaultSleep;
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * Sends what is pending until nothing is, the target settled, the
   * deadline came, the signal aborted, or the server refused the token.
   * Intents a previous process left are sent like new ones, with their keys.
   *
   * @param options deadline, abort signal and target.
   * @returns what settled and what is left.
   * @throws OutboxPrincipalError when the token belongs to another principal
   *   than the outbox (nothing is sent).
   * @throws OutboxCorruptError when a row to send is corrupt (nothing more is sent).
   */
  async drain(options: DrainOptions = {}): Promise<DrainReport> {
    const { outbox } = this.options;
    const signal = options.signal ?? new AbortController().signal;
    const settled: Intent[] = [];
    const report = (stoppedBy: StopReason, halt?: string): DrainReport => ({
      settled,
      pending: outbox.pendingCount(),
      stoppedBy,
      ...(halt === undefined ? {} : { halt }),
    });
    if (outbox.pendingCount() === 0) return report('empty');
    if (signal.aborted) return report('aborted');
    // Every drain, not only the first: it refreshes the server's time
    // before any intent is sent again (H1).
    const state: DrainState = { held: new Set(), attemptedHere: new Set() };
    const stop = await this.checkPrincipal(options.deadline, signal, state);
    if (stop !== undefined) return report(stop.reason, stop.detail);
    const inFlight = this.inFlight;
    // Written by the attempts as they end, read by the loop.
    const ended: { halt?: { reason: 'unauthenticated'; detail: string }; failure?: Error } = {};
    // A function, not the property: the signal changes while the loop awaits.
    const aborted = (): boolean => signal.aborted;
    // Settled here, or by another drain of this sender.
    const targetDone = (): boolean =>
      options.target !== undefined &&
      (settled.some((i) => i.key === options.target) ||
        outbox.get(options.target)?.state !== 'pending');
    // Not sent, nor to be sent in this drain, while the clocks disagree.
    const targetHeld = (): boolean => {
      const seq = options.target === undefined ? undefined : outbox.get(options.target)?.seq;
      return seq !== undefined && state.held.has(seq);
    };
    // In flight, or held: not to be started now.
    const busy = (): Set<number> => new Set([...inFlight.keys(), ...state.held]);
    const clockHalt = (): DrainReport => {
      const detail = state.disagreement ?? state.noServerTime ?? '';
      this.emit({ type: 'halted', reason: 'clock_disagreement', detail });
      return report('clock_disagreement', detail);
    };
    const start = (intent: Intent): void => {
      const run = this.attempt(intent, signal, settled, state)
        .then((h) => {
          if (h !== undefined) ended.halt = h;
        })
        .catch((err: unknown) => {
          ended.failure ??= err instanceof Error ? err : new Error(String(err));
        })
        .finally(() => inFlight.delete(intent.seq));
      inFlight.set(intent.seq, run);
    };
    for (;;) {
      const stopping =
        ended.failure !== undefined ||
        ended.halt !== undefined ||
        signal.aborted ||
        targetDone() ||
        targetHeld();
      const now = this.clock();
      const beforeDeadline = options.deadline === undefined || now < options.deadline;
      if (!stopping && beforeDeadline) {
        const slots = this.options.concurrency - inFlight.size;
        if (slots > 0) {
          for (const intent of outbox.ready(now, busy(), slots)) start(intent);
        }
      }
      if (inFlight.size === 0) {
        if (ended.failure !== undefined) throw ended.failure;
        if (ended.halt !== undefined) {
          this.emit({ type: 'halted', ...ended.halt });
          return report(ended.halt.reason, ended.halt.detail);
        }
        if (aborted()) return report('aborted');
        if (targetDone()) return report('target');
        if (targetHeld()) return clockHalt();
        const next = outbox.nextAttemptAt(busy());
        if (next === undefined) return state.held.size > 0 ? clockHalt() : report('empty');
        if (options.deadline !== undefined && Math.max(next, now) >= options.deadline) {
          return state.held.size > 0 ? clockHalt() : report('deadline');
        }
        try {
          await this.sleep(Math.max(0, next - now), signal);
        } catch {
          return report('aborted');
        }
        continue;
      }
      // Wait for an attempt to end, or for the next intent of a free lane to
      // fall due while a slot is free.
      const waits: Promise<unknown>[] = [...inFlight.values()];
      const wake = new AbortController();
      const next =
        stopping || inFlight.size >= this.options.concurrency
          ? undefined
          : outbox.nextAttemptAt(busy());
      if (next !== undefined && (options.deadline === undefined || next < options.deadline)) {
        const both = AbortSignal.any([signal, wake.signal]);
        waits.push(this.sleep(Math.max(0, next - now), both).catch(() => undefined));
      }
      await Promise.race(waits);
      wake.abort();
    }
  }

  private emit(event: SendEvent): void {
    this.options.onEvent?.(event);
  }

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
  private observeLifetime(told: number | undefined): void {
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
   * A `Date` more than the TTL margin ahead of the local clock is ignored
   * (M4): one absurd date (a gateway's year 9999) would otherwise raise the
   * mark for good and expire every intent, new ones too. A `Date` more than
   * the margin from the local clock, either way, is a disagreement (F1):
   * one of the clocks is wrong, and which one is not known, so no intent
   * with an attempt behind it is sent again in this drain.
   */
  private observeServer(serverTime: number | undefined, state: DrainState): void {
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
   * the outbox, or a key the caller sent before, R1); an intent with an
   * attempt behind it (counted, or cut off) from before this drain while no
   * server time is known (its age cannot be checked on the server clock;
   * one attempted in this drain is as old as the drain).
   */
  private hold(intent: Intent, state: DrainState): boolean {
    const attempted =
      (intent.attempts > 0 || intent.attemptStartedAt !== null) &&
      !state.attemptedHere.has(intent.seq);
    const unknown = state.noServerTime !== undefined && this.serverClock === undefined;
    if (state.disagreement === undefined && !(unknown && attempted)) return false;
    state.held.add(intent.seq);
    return true;
  }

  /** The server's time now, as far as its last `Date` tells, or undefined. */
  private serverNow(): number | undefined {
    const seen = this.serverClock;
    return seen === undefined ? undefined : seen.at + Math.max(0, this.monotonic() - seen.mono);
  }

  private async checkPrincipal(
    deadline: number | undefined,
    signal: AbortSignal,
    state: DrainState,
  ): Promise<{ reason: StopReason; detail?: string } | undefined> {
    for (let attempt = 1; ; attempt += 1) {
      let error: string;
      let retryAfterMs: number | undefined;
      try {
        const answer = await this.request('GET', '/api/v1/me', null, undefined, signal);
        this.observeServer(answer.serverTime, state);
        this.observeLifetime(answer.keyLifetimeMs);
        const cls = classifyAnswer(answer, this.clock());
        const id = answer.status === 200 ? principalId(answer.body) : undefined;
        if (id !== undefined) {
          this.options.outbox.bindPrincipal(id);
          this.emit({ type: 'principal', principalId: id });
          return undefined;
        }
        if (cls.kind === 'unauthenticated') {
          const detail = `GET /api/v1/me answered 401: the token is not valid (${answer.body})`;
          this.emit({ type: 'halted', reason: 'unauthenticated', detail });
          return { reason: 'unauthenticated', detail };
        }
        if (cls.kind !== 'retry') {
          const detail = `GET /api/v1/me answered ${String(answer.status)}: ${answer.body}`;
          this.emit({ type: 'halted', reason: 'unexpected_answer', detail });
          return { reason: 'unexpected_answer', detail };
        }
        error = cls.reason;
        retryAfterMs = cls.retryAfterMs;
      } catch (err) {
        if (err instanceof OutboxError) throw err;
        if (signal.aborted) return { reason: 'aborted' };
        error = describeError(err, this.options.timeoutMs);
      }
      const wait = backoffDelay(attempt, this.options.backoff, this.random, retryAfterMs);
      this.emit({
        type: 'retry',
        key: null,
        seq: null,
        operation: 'getMe',
        attempt,
        error,
        delayMs: wait,
      });
      if (deadline !== undefined && this.clock() + wait >= deadline) return { reason: 'deadline' };
      try {
        await this.sleep(wait, signal);
      } catch {
        return { reason: 'aborted' };
      }
    }
  }

  /**
   * One attempt of one intent, recorded in the outbox.
   *
   * @returns a halt when the server refused the token.
   */
  private async attempt(
    intent: Intent,
    signal: AbortSignal,
    settled: Intent[],
    state: DrainState,
  ): Promise<{ reason: 'unauthenticated'; detail: string } | undefined> {
    const { outbox, ttlMarginMs } = this.options;
    const keyTtlMs = this.keyLifetimeMs();
    // Before the age: while the clocks disagree, neither age can be trusted
    // to show a key the server still keeps (F1).
    if (this.hold(intent, state)) return undefined;
    state.attemptedHere.add(intent.seq);
    const started = this.clock();
    // From when it was stated, or from the key's own time when that is
    // earlier: a key the caller made and may have sent long before it was
    // stated here (review). The server counts from its first sight of the
    // key, which is never before the key was made. Up to the latest time
    // the outbox has seen, at least (finding 5): a clock stepped back would
    // make an old key look young.
    const localAgeMs =
      Math.max(started, outbox.highWater()) - Math.min(intent.createdAt, keyTime(intent.key));
    // On the server's clock too (H1): a client clock ahead when the intent
    // was stated, corrected since, understates the local age; the server's
    // time before the first attempt is never after its first sight of the key.
    const serverNow = this.serverNow();
    const serverAgeMs =
      serverNow === undefined || intent.serverAnchor === null
        ? -Infinity
        : serverNow - intent.serverAnchor;
    const ageMs = Math.round(Math.max(localAgeMs, serverAgeMs));
    if (ageMs >= keyTtlMs - ttlMarginMs) {
      outbox.recordExpired(intent.seq, started);
      const expired = outbox.get(intent.key) ?? intent;
      settled.push(expired);
      this.emit({ type: 'expired', intent: expired, ageMs });
      return undefined;
    }
    // Before anything is recorded or sent: a path resolving to another
    // origin would take the token there (F2).
    this.url(intent.path);
    const attempt = intent.attempts + 1;
    // Counted, durably, before the first byte leaves (finding 6): a crash
    // during the attempt leaves the count true, and the count is how a
    // later answer knows an earlier attempt may have reached the server.
    outbox.recordAttempt(
      intent.seq,
      attempt,
      started,
      serverNow === undefined ? undefined : Math.round(serverNow),
    );
    this.emit({
      type: 'attempt',
      key: intent.key,
      seq: intent.seq,
      operation: intent.operation,
      attempt,
    });
    let answer: WireAnswer;
    try {
      answer = await this.request(intent.method, intent.path, intent.body, intent.key, signal);
    } catch (err) {
      // An attempt cut short by the caller counts (its bytes may have
      // left); the intent is due again at once, with the same key.
      if (signal.aborted) {
        outbox.recordRetry(
          intent.seq,
          attempt,
          this.clock(),
          'interrupted before the answer: the attempt may have reached the server',
        );
        return undefined;
      }
      this.scheduleRetry(intent, attempt, describeError(err, this.options.timeoutMs), undefined);
      return undefined;
    }
    this.observeServer(answer.serverTime, state);
    this.observeLifetime(answer.keyLifetimeMs);
    const now = this.clock();
    // The intent as read before this attempt: an unmarked answer then
    // makes this one the second in a row.
    const previousUnmarked = intent.unmarkedAnswer;
    // Any attempt counted before this one may have reached the server (its
    // bytes may have left), whatever it met after.
    const mayHaveReached = intent.attempts > 0;
    const cls = classifyAnswer({ ...answer, previousUnmarked, mayHaveReached }, now);
    const final = (
      state: 'done' | 'failed',
      failure: FailureReason | null,
      note?: string,
    ): void => {
      outbox.recordFinal(intent.seq, {
        ...(note === undefined ? {} : { note }),
        attempts: attempt,
        state,
        failure,
        answer: {
          status: answer.status,
          replayed: answer.replayed,
          marked: answer.marked,
          headers: answer.headers,
          body: answer.body,
        },
        now,
      });
      const recorded = outbox.get(intent.key) ?? intent;
      settled.push(recorded);
      this.emit({ type: 'settled', intent: recorded });
    };
    if (answer.oversize) {
      // Not read whole (L1), but classified by its status and marker first
      // (F4): its headers were read. Without the body, a 409 may be
      // request_in_progress or the key's stored conflict, and a 422 key
      // reuse or a stored refusal; any answer but a retryable status, a
      // 401 or a marked 2xx may hide the committed answer, on a first
      // attempt too.
      const repeated =
        answer.status !== 409 && (cls.kind === 'retry' || cls.kind === 'unauthenticated');
      if (!repeated) {
        const done = answer.status >= 200 && answer.status < 300 && answer.marked;
        final(done ? 'done' : 'failed', done ? null : 'outcome_unknown', OVERSIZE_NOTE);
        return undefined;
      }
    }
    switch (cls.kind) {
      case 'final':
        final('done', null);
        return undefined;
      case 'key_reuse':
        final('failed', 'key_reuse');
        return undefined;
      case 'unexpected':
        final('failed', 'unexpected_answer');
        return undefined;
      case 'outcome_unknown':
        final('failed', 'outcome_unknown');
        return undefined;
      case 'unmarked':
        this.scheduleRetry(
          intent,
          attempt,
          `${UNMARKED}${cls.reason} without Idempotent-Replay, not the key's answer: repeated once with the same key`,
          undefined,
          true,
        );
        return undefined;
      case 'retry':
        this.scheduleRetry(intent, attempt, cls.reason, cls.retryAfterMs);
        return undefined;
      case 'unauthenticated':
        outbox.recordRetry(intent.seq, attempt, now, '401 unauthenticated');
        return {
          reason: 'unauthenticated',
          detail: `${intent.method} ${intent.path} answered 401: the token is not valid (${answer.body})`,
        };
    }
  }

  private scheduleRetry(
    intent: Intent,
    attempt: number,
    error: string,
    retryAfterMs: number | undefined,
    unmarked = false,
  ): void {
    const wait = backoffDelay(attempt, this.options.backoff, this.random, retryAfterMs);
    this.options.outbox.recordRetry(intent.seq, attempt, this.clock() + wait, error, { unmarked });
    this.emit({
      type: 'retry',
      key: intent.key,
      seq: intent.seq,
      operation: intent.operation,
      attempt,
      error,
      delayMs: wait,
    });
  }

  /**
   * A path resolved against the origin, which it must stay on.
   *
   * @throws OutboxCorruptError when it resolves to another origin (a row
   *   the outbox would refuse, e.g. `/\t/host/x`, as the URL parser drops
   *   tab, CR and LF): nothing is sent.
   */
  private url(path: string): URL {
    const url = new URL(path, this.origin);
    if (url.origin !== this.origin.origin) {
      throw new OutboxCorruptError(
        `the path ${JSON.stringify(path)} resolves to another origin (${url.origin}), which would get the token; it is not sent: repair or remove the intent`,
      );
    }
    return url;
  }

  private async request(
    method: string,
    path: string,
    body: string | null,
    key: string | undefined,
    signal: AbortSignal,
  ): Promise<WireAnswer> {
    // Checked before the token is attached.
    const url = this.url(path);
    const headers: Record<string, string> = { authorization: `Bearer ${this.options.token}` };
    if (body !== null) headers['content-type'] = 'application/json';
    if (key !== undefined) headers['idempotency-key'] = key;
    const both = AbortSignal.any([signal, AbortSignal.timeout(this.options.timeoutMs)]);
    const res = await this.fetch(url, {
      method,
      headers,
      body,
      signal: both,
      redirect: 'manual',
    });
    const { text, oversize } = await readBody(res);
    const kept: Record<string, string> = {};
    for (const name of KEPT_HEADERS) {
      const value = res.headers.get(name);
      if (value !== null) kept[name] = value;
    }
    const marker = res.headers.get('idempotent-replay')?.trim().toLowerCase();
    return {
      oversize,
      status: res.status,
      replayed: marker === 'true',
      marked: marker === 'true' || marker === 'false',
      headers: kept,
      body: text,
      retryAfter: res.headers.get('retry-after'),
      serverTime: parseHttpDate(res.headers.get('date')),
      keyLifetimeMs: parseKeyLifetime(res.headers.get(KEY_LIFETIME_HEADER)),
      code: res.status >= 400 ? problemCode(text) : undefined,
    };
  }
}
