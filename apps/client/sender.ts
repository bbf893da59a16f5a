/**
 * The sender: drains an outbox over HTTP. It sends each pending intent with
 * its own key, one at a time per lane in the order stated (intents of other
 * lanes in parallel, up to a concurrency), repeats what the retry policy
 * (retry.ts) says to repeat with the same key and the same bytes, records
 * every final answer in the outbox before handing it on, repeats once an
 * answer not marked as the key's (a 2xx or a stored status without
 * `Idempotent-Replay`) and fails as `outcome_unknown` a second one in a
 * row, and never sends a key older than the server keeps keys (less a
 * margin): such an intent is reported as expired instead, because the
 * server would run it again as new. One attempt is sender-attempt.ts; the
 * key's age on both clocks and the halts for a clock disagreement are
 * sender-clock.ts; the HTTP exchange is sender-transport.ts.
 *
 * Each drain first asks `GET /api/v1/me` who the token belongs to (which
 * also gives the server's time before anything is sent or sent again) and
 * binds the outbox to that principal (keys are per principal: another
 * principal's repeat of a key would run as a new request).
 */
import { OutboxError, type Intent } from './outbox.js';
import { backoffDelay, classifyAnswer } from './retry.js';
import { attempt, type AttemptContext } from './sender-attempt.js';
import { ServerClock, type DrainState } from './sender-clock.js';
import { answerLine, describeError, principalId } from './sender-lines.js';
import { Transport } from './sender-transport.js';
import type {
  DrainOptions,
  DrainReport,
  SendEvent,
  SenderOptions,
  StopReason,
} from './sender-types.js';

export * from './sender-types.js';
export { DEFAULT_KEY_TTL_MS } from './sender-clock.js';
export { MAX_BODY_BYTES, OVERSIZE_NOTE } from './sender-transport.js';

// A built-in through process.getBuiltinModule, not an ES import: the import
// reads every export of the module, lazy ones included, which costs the
// command line's start-up (docs/DECISIONS.md, "The client sends with
// node:http").
const { setTimeout: delay } = process.getBuiltinModule('node:timers/promises');

const defaultSleep = (ms: number, signal: AbortSignal): Promise<void> =>
  delay(ms, undefined, { signal });

/** Drains an outbox; one sender per outbox and token. */
export class Sender {
  private readonly clock: () => number;
  private readonly random: () => number;
  private readonly sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  private readonly transport: Transport;
  private readonly server: ServerClock;
  private readonly parts: AttemptContext;
  /**
   * Attempts in flight, by intent, shared by every drain of this sender:
   * two drains at once (two `deliver` calls) never send one intent twice at
   * once nor record its answer twice.
   */
  private readonly inFlight = new Map<number, Promise<void>>();

  /**
   * @param options the outbox, the server, the TTL and the pacing.
   * @throws RangeError for a base URL that is not an http(s) origin, an empty
   *   token, a margin not below the TTL, a timeout not below the margin, or a
   *   concurrency below 1.
   */
  constructor(private readonly options: SenderOptions) {
    this.clock = options.clock ?? Date.now;
    this.transport = new Transport(options.baseUrl, options.token, options.timeoutMs);
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
    const monotonic = options.monotonic ?? (() => performance.now());
    this.server = new ServerClock(options, this.clock, monotonic);
    this.random = options.random ?? Math.random;
    this.sleep = options.sleep ?? defaultSleep;
    this.parts = {
      options,
      clock: this.clock,
      random: this.random,
      transport: this.transport,
      server: this.server,
      emit: (event) => {
        this.emit(event);
      },
    };
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
    const report = (stoppedBy: StopReason, halt?: string, unreached?: string): DrainReport => ({
      settled,
      pending: outbox.pendingCount(),
      stoppedBy,
      ...(halt === undefined ? {} : { halt }),
      ...(unreached === undefined ? {} : { unreached }),
    });
    if (options.checkWhenEmpty !== true && outbox.pendingCount() === 0) return report('empty');
    if (signal.aborted) return report('aborted');
    // Every drain, not only the first: it refreshes the server's time
    // before any intent is sent again (and checks the URL and the token).
    const state: DrainState = { held: new Set(), attemptedHere: new Set() };
    const stop = await this.checkPrincipal(options.deadline, signal, state);
    if (stop !== undefined) return report(stop.reason, stop.detail, stop.unreached);
    if (outbox.pendingCount() === 0) return report('empty');
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
      if (state.lifetimeTooShort !== undefined) {
        this.emit({
          type: 'halted',
          reason: 'key_lifetime_too_short',
          detail: state.lifetimeTooShort,
        });
        return report('key_lifetime_too_short', state.lifetimeTooShort);
      }
      const detail = state.disagreement ?? state.noServerTime ?? '';
      this.emit({ type: 'halted', reason: 'clock_disagreement', detail });
      return report('clock_disagreement', detail);
    };
    const start = (intent: Intent): void => {
      const run = attempt(this.parts, intent, signal, settled, state)
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
    return this.server.keyLifetimeMs();
  }

  /**
   * Closes the idle connections kept for later requests. A later drain
   * opens new ones; idle connections do not keep the process alive either
   * way.
   */
  close(): void {
    this.transport.close();
  }

  private async checkPrincipal(
    deadline: number | undefined,
    signal: AbortSignal,
    state: DrainState,
  ): Promise<{ reason: StopReason; detail?: string; unreached?: string } | undefined> {
    // What the last try met when the server was not reached at all.
    let unreached: string | undefined;
    for (let attempt = 1; ; attempt += 1) {
      let error: string;
      let retryAfterMs: number | undefined;
      try {
        const answer = await this.transport.request('GET', '/api/v1/me', null, undefined, signal);
        unreached = undefined;
        this.server.observeServer(answer.serverTime, state);
        this.server.observeLifetime(answer.keyLifetimeMs);
        const cls = classifyAnswer(answer, this.clock());
        const id = answer.status === 200 ? principalId(answer.body) : undefined;
        if (id !== undefined) {
          this.options.outbox.bindPrincipal(id);
          this.emit({ type: 'principal', principalId: id });
          return undefined;
        }
        if (cls.kind === 'unauthenticated') {
          const detail = `GET /api/v1/me answered ${answerLine(answer)}; nothing was sent, and intents stay pending for a good token`;
          this.emit({ type: 'halted', reason: 'unauthenticated', detail });
          return { reason: 'unauthenticated', detail };
        }
        if (cls.kind !== 'retry') {
          const detail = `GET /api/v1/me answered ${answerLine(answer)}, an answer the API does not give; nothing was sent`;
          this.emit({ type: 'halted', reason: 'unexpected_answer', detail });
          return { reason: 'unexpected_answer', detail };
        }
        error = cls.reason;
        retryAfterMs = cls.retryAfterMs;
      } catch (err) {
        if (err instanceof OutboxError) throw err;
        if (signal.aborted) return { reason: 'aborted' };
        error = describeError(err, this.options.timeoutMs);
        unreached = error;
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
      const ended = unreached === undefined ? {} : { unreached };
      if (deadline !== undefined && this.clock() + wait >= deadline) {
        return { reason: 'deadline', ...ended };
      }
      try {
        await this.sleep(wait, signal);
      } catch {
        return { reason: 'aborted', ...ended };
      }
    }
  }
}
