/**
 * One attempt of one intent, recorded in the outbox: the key's age checked
 * on both clocks (an expired key is failed, not sent), the attempt counted
 * durably before its first byte leaves, the answer classified by the retry
 * policy (retry.ts) and recorded as final or as a retry with the same key.
 */
import { keyTime, type FailureReason, type Intent } from './outbox.js';
import { backoffDelay, classifyAnswer } from './retry.js';
import type { DrainState, ServerClock } from './sender-clock.js';
import { answerLine, describeError } from './sender-lines.js';
import { OVERSIZE_NOTE, type Transport, type WireAnswer } from './sender-transport.js';
import type { SendEvent, SenderOptions } from './sender-types.js';

/** What an attempt uses of its sender. */
export interface AttemptContext {
  /** The sender's options (the outbox, the margin, the backoff). */
  readonly options: SenderOptions;
  /** The local clock, in milliseconds since the epoch. */
  readonly clock: () => number;
  /** Random numbers in [0, 1) for the jitter. */
  readonly random: () => number;
  /** The HTTP transport. */
  readonly transport: Transport;
  /** The server's clock and key lifetime. */
  readonly server: ServerClock;
  /** Hands an event to the caller. */
  readonly emit: (event: SendEvent) => void;
}

/** How the last error of an intent whose answer was unmarked starts, for people reading it. */
const UNMARKED = 'unmarked answer: ';

/**
 * One attempt of one intent, recorded in the outbox.
 *
 * @param ctx the sender's parts.
 * @param intent the intent, as read before the attempt.
 * @param signal aborts the attempt (it is counted, and due again at once).
 * @param settled where an intent that reaches its final state is pushed.
 * @param state what the drain learnt so far.
 * @returns a halt when the server refused the token.
 * @throws OutboxError when the outbox cannot record it.
 */
export async function attempt(
  ctx: AttemptContext,
  intent: Intent,
  signal: AbortSignal,
  settled: Intent[],
  state: DrainState,
): Promise<{ reason: 'unauthenticated'; detail: string } | undefined> {
  const { outbox, ttlMarginMs } = ctx.options;
  // Never longer than the lifetime its earlier attempts went out under: a
  // server that keeps keys longer now kept this one as long as it said then.
  const inForceMs = ctx.server.keyLifetimeMs();
  const keyTtlMs = Math.min(inForceMs, intent.keyLifetimeMs ?? Infinity);
  // Before the age: while the clocks disagree, neither age can be trusted
  // to show a key the server still keeps.
  if (ctx.server.hold(intent, state)) return undefined;
  if (inForceMs <= ttlMarginMs) {
    // Every key would count as expired: held, not failed, until a person
    // fixes the lifetime or the margin (the sender's warning says which).
    state.lifetimeTooShort ??= `the key lifetime in force, ${String(inForceMs / 1000)}s (the server's Idempotency-Key-Lifetime, or --key-ttl), is not longer than --ttl-margin ${String(ttlMarginMs / 1000)}s: nothing was sent and every intent is still pending; lower --ttl-margin, or fix what sends that lifetime`;
    state.held.add(intent.seq);
    // An intent sent before keeps the short lifetime: its key may be gone
    // by it, and a longer lifetime told later must not make it look young.
    if (intent.attempts > 0 || intent.attemptStartedAt !== null)
      outbox.recordKeyLifetime(intent.seq, inForceMs, ctx.clock());
    return undefined;
  }
  state.attemptedHere.add(intent.seq);
  const started = ctx.clock();
  // From when it was stated, or from the key's own time when that is
  // earlier: a key the caller made and may have sent long before it was
  // stated here. The server counts from its first sight of the
  // key, which is never before the key was made. Up to the latest time
  // the outbox has seen, at least: a clock stepped back would
  // make an old key look young.
  const localAgeMs =
    Math.max(started, outbox.highWater()) - Math.min(intent.createdAt, keyTime(intent.key));
  // On the server's clock too: a client clock ahead when the intent
  // was stated, corrected since, understates the local age; the server's
  // time before the first attempt is never after its first sight of the key.
  const serverNow = ctx.server.serverNow();
  const serverAgeMs =
    serverNow === undefined || intent.serverAnchor === null
      ? -Infinity
      : serverNow - intent.serverAnchor;
  const ageMs = Math.round(Math.max(localAgeMs, serverAgeMs));
  if (ageMs >= keyTtlMs - ttlMarginMs) {
    outbox.recordExpired(intent.seq, started);
    const expired = outbox.get(intent.key) ?? intent;
    settled.push(expired);
    ctx.emit({ type: 'expired', intent: expired, ageMs });
    return undefined;
  }
  // Before anything is recorded or sent: a path resolving to another
  // origin would take the token there.
  ctx.transport.url(intent.path);
  const attempt = intent.attempts + 1;
  // Counted, durably, before the first byte leaves: a crash
  // during the attempt leaves the count true, and the count is how a
  // later answer knows an earlier attempt may have reached the server.
  outbox.recordAttempt(
    intent.seq,
    attempt,
    started,
    serverNow === undefined ? undefined : Math.round(serverNow),
    inForceMs,
  );
  ctx.emit({
    type: 'attempt',
    key: intent.key,
    seq: intent.seq,
    operation: intent.operation,
    attempt,
  });
  let answer: WireAnswer;
  try {
    answer = await ctx.transport.request(
      intent.method,
      intent.path,
      intent.body,
      intent.key,
      signal,
    );
  } catch (err) {
    // An attempt cut short by the caller counts (its bytes may have
    // left); the intent is due again at once, with the same key.
    if (signal.aborted) {
      outbox.recordRetry(
        intent.seq,
        attempt,
        ctx.clock(),
        'interrupted before the answer: the attempt may have reached the server',
      );
      return undefined;
    }
    scheduleRetry(ctx, intent, attempt, describeError(err, ctx.options.timeoutMs), undefined);
    return undefined;
  }
  ctx.server.observeServer(answer.serverTime, state);
  ctx.server.observeLifetime(answer.keyLifetimeMs);
  const now = ctx.clock();
  // The intent as read before this attempt: an unmarked answer then
  // makes this one the second in a row.
  const previousUnmarked = intent.unmarkedAnswer;
  // Any attempt counted before this one may have reached the server (its
  // bytes may have left), whatever it met after; so may one whose start
  // is kept with none counted (a version 1 outbox's attempt cut off).
  const mayHaveReached = intent.attempts > 0 || intent.attemptStartedAt !== null;
  const cls = classifyAnswer({ ...answer, previousUnmarked, mayHaveReached }, now);
  const final = (state: 'done' | 'failed', failure: FailureReason | null, note?: string): void => {
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
    ctx.emit({ type: 'settled', intent: recorded });
  };
  if (answer.oversize) {
    // Not read whole, but classified by its status and marker first,
    // as its headers were read. Without the body, a 409 may be
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
      scheduleRetry(
        ctx,
        intent,
        attempt,
        `${UNMARKED}${cls.reason} without Idempotent-Replay, not the key's answer: repeated once with the same key`,
        undefined,
        true,
      );
      return undefined;
    case 'retry':
      scheduleRetry(ctx, intent, attempt, cls.reason, cls.retryAfterMs);
      return undefined;
    case 'unauthenticated':
      outbox.recordRetry(intent.seq, attempt, now, '401 unauthenticated');
      return {
        reason: 'unauthenticated',
        detail: `${intent.method} ${intent.path} answered ${answerLine(answer)}; the intent stays pending for a good token`,
      };
  }
}

function scheduleRetry(
  ctx: AttemptContext,
  intent: Intent,
  attempt: number,
  error: string,
  retryAfterMs: number | undefined,
  unmarked = false,
): void {
  const wait = backoffDelay(attempt, ctx.options.backoff, ctx.random, retryAfterMs);
  ctx.options.outbox.recordRetry(intent.seq, attempt, ctx.clock() + wait, error, { unmarked });
  ctx.emit({
    type: 'retry',
    key: intent.key,
    seq: intent.seq,
    operation: intent.operation,
    attempt,
    error,
    delayMs: wait,
  });
}
