/**
 * What a keyed route runs, compiled once per route in `onRoute`:
 * - `preParsing` keeps the body bytes as received (the fingerprint's input),
 *   whatever body parser the application uses;
 * - `preValidation` reads the key, refuses a query string, computes the
 *   fingerprint and tries the replay fast path, from the store's memory
 *   only (a repeat memory cannot answer is decided by the attempt's insert,
 *   still before validation: 01-idempotency.md, "Algorithm", step 1);
 * - the handler's wrapper takes the key's turn in this process, runs the
 *   attempt in the unit of work (attempt.ts) and sends the answer only after
 *   the decision, so only after the commit. A duplicate that waited for the
 *   turn goes to the attempt too: its insert meets the row the first one
 *   committed, and answers from it, as a duplicate in another process does.
 *
 * Each step is a function of its own over the route's {@link KeyedContext},
 * in the order a request meets them.
 */
import { SpanStatusCode, type Attributes, type Span } from '@opentelemetry/api';
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  RouteHandlerMethod,
  preParsingAsyncHookHandler,
  preValidationAsyncHookHandler,
} from 'fastify';
import { AppError, problem } from '../../../kernel/errs/index.js';
import type { Id } from '../../../kernel/ids/index.js';
import { clearOneTimeSecret, type IdempotencyEntry } from '../../../kernel/idempotency/index.js';
import { isRetryable } from '../../../kernel/txn/index.js';
import { answerFromEntry, inProgressProblem, sendAnswer, sendProblem } from './answers.js';
import { runAttempt, type AttemptInput, type Decision } from './attempt.js';
import { cloneBody } from './clone.js';
import { capturePayload, captureProblem, withSendRefused, type Guard } from './capture.js';
import { FST_IDEMPOTENCY_INVALID_OPTION } from './errors.js';
import type { KeyedRoute } from './checks.js';
import { requestFingerprint } from './fingerprint.js';
import { hasKeyHeader, KEY_HEADER, readKeyHeader } from './key.js';
import { keepBytes } from './raw-body.js';
import type { ResolvedOptions } from './options.js';
import type { Outcome } from './outcome.js';
import { keyedStateOf, setBodyBytes, setKeyedState, type KeyedState } from './request-state.js';
import type { SingleFlight } from './single-flight.js';
import {
  activeContext,
  ATTRIBUTES,
  inSpan,
  inSpanSync,
  SPANS,
  spanOutcome,
  startSpan,
} from './tracing.js';

const KEY_HINT =
  'Send a UUIDv7 (for example 0190f2a4-1b2c-7d3e-8f40-123456789abc), bare or in double quotes.';

/** The hooks and the handler wrapper of one keyed route. */
export interface KeyedHooks {
  readonly preParsing: preParsingAsyncHookHandler;
  readonly preValidation: preValidationAsyncHookHandler;
  wrap(handler: RouteHandlerMethod): RouteHandlerMethod;
}

/** What every step of a keyed route reads: the plugin's options, the process's duplicates, the route. */
interface KeyedContext {
  readonly options: ResolvedOptions;
  readonly flights: SingleFlight;
  readonly route: KeyedRoute;
}

/**
 * Compiles the hooks of one keyed route.
 *
 * @param options the plugin's resolved options.
 * @param flights the process's queue of duplicates.
 * @param route the route's keyed metadata.
 * @returns its hooks and handler wrapper.
 */
export function keyedHooks(
  options: ResolvedOptions,
  flights: SingleFlight,
  route: KeyedRoute,
): KeyedHooks {
  const ctx: KeyedContext = { options, flights, route };
  return {
    preParsing: keepBodyBytes,
    preValidation: (req, reply) => beforeValidation(ctx, req, reply),
    wrap: (original) =>
      async function keyedHandler(this: FastifyInstance, req, reply) {
        const state = keyedStateOf(req);
        if (state === null) {
          // Not a keyed request (no key, or an anonymous caller): a plain route.
          if (req.validationError) throw req.validationError;
          return original.call(this, req, reply);
        }
        return inSpan(SPANS.request, requestAttributes(ctx, req), (span) =>
          ended(
            span,
            reply,
            inTurn(ctx, req, reply, state, span, () => original.call(this, req, reply)),
          ),
        );
      },
  };
}

/**
 * preParsing: keeps the body's bytes whenever a key is sent, owner or not
 * yet (who the caller is may be settled only by a later hook, and the
 * fingerprint must never lose the body).
 */
const keepBodyBytes: preParsingAsyncHookHandler = async (req, _reply, payload) => {
  if (!hasKeyHeader(req.raw.rawHeaders)) return payload;
  const { stream, chunks } = keepBytes(payload);
  setBodyBytes(req, chunks);
  return Promise.resolve(stream);
};

/**
 * preValidation: the key, its fingerprint and the replay from memory, all
 * before validation. A repeat memory cannot answer goes on to the attempt,
 * whose insert decides.
 */
async function beforeValidation(
  ctx: KeyedContext,
  req: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply | undefined> {
  // Keys belong to their owner: an anonymous caller's key is ignored.
  const owner = ownerOf(ctx, req);
  if (owner === null) return undefined;
  const key = keyOf(ctx, req, reply);
  if (key === null) return undefined;
  const state: KeyedState = {
    principalId: owner as Id,
    key,
    route: ctx.route,
    sha256: requestFingerprint(req),
  };
  setKeyedState(req, state);
  const found = ctx.options.store.recall(state.principalId, state.key, ctx.options.clock.now());
  // A JavaScript store may answer a miss with undefined.
  if (!found) return undefined;
  return inSpanSync(SPANS.request, requestAttributes(ctx, req), (span) => {
    const sent = answerFromRow(ctx, req, reply, state, found, span, 'memory');
    endAttributes(span, reply);
    return sent;
  });
}

/** The attributes of a keyed request's `idempotency` span at its start. */
function requestAttributes(ctx: KeyedContext, req: FastifyRequest): Attributes {
  return {
    [ATTRIBUTES.operation]: ctx.route.operationId,
    [ATTRIBUTES.route]: req.routeOptions.url ?? req.url,
  };
}

/** The status the reply ended with, on the request's span (5xx an error, as for a server span). */
function endAttributes(span: Span, reply: FastifyReply): void {
  span.setAttribute(ATTRIBUTES.status, reply.statusCode);
  if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
}

/** Waits for the handler's answer, then puts its status on the request's span. */
async function ended(
  span: Span,
  reply: FastifyReply,
  answered: Promise<FastifyReply>,
): Promise<FastifyReply> {
  const sent = await answered;
  endAttributes(span, reply);
  return sent;
}

/** The owner of the request's keys, or null for an anonymous caller. */
function ownerOf(ctx: KeyedContext, req: FastifyRequest): string | null {
  // Typed, but a JavaScript caller may return anything: checked here.
  const owner: unknown = ctx.options.scope(req);
  if (owner === null || owner === undefined) return null;
  if (typeof owner !== 'string' || owner === '') {
    throw new FST_IDEMPOTENCY_INVALID_OPTION(
      'scope',
      `returned ${owner === '' ? 'an empty string' : typeof owner}; it must return the owner's id or null`,
    );
  }
  return owner;
}

/**
 * The request's key, or null when it has none and the route does not
 * require one.
 *
 * @throws AppError 400 for a missing required key, a key that is not a
 *   UUIDv7, or a keyed request with a query string.
 */
function keyOf(ctx: KeyedContext, req: FastifyRequest, reply: FastifyReply): Id | null {
  const header = readKeyHeader(req.raw.rawHeaders);
  if (header.kind === 'absent') {
    if (!ctx.route.required) return null;
    refuse(
      ctx,
      req,
      reply,
      problem('validation_failed', `This route requires an ${KEY_HEADER} header.`, {
        errors: [{ pointer: `#header/${KEY_HEADER}`, code: 'required' }],
        hint: KEY_HINT,
      }),
    );
  }
  if (header.kind === 'invalid') {
    refuse(
      ctx,
      req,
      reply,
      problem('validation_failed', `The ${KEY_HEADER} header is not a UUIDv7.`, {
        errors: [{ pointer: `#header/${KEY_HEADER}`, code: 'invalid_format' }],
        hint: KEY_HINT,
      }),
    );
  }
  if ((req.raw.url ?? req.url).includes('?')) {
    refuse(
      ctx,
      req,
      reply,
      problem(
        'validation_failed',
        'A request with an Idempotency-Key may not carry a query string.',
        {
          errors: [{ pointer: '#query', code: 'not_allowed' }],
          hint: 'Put every input of a keyed request in its path or body.',
        },
      ),
    );
  }
  return header.key;
}

/** Records an invalid key and throws its problem. */
function refuse(ctx: KeyedContext, req: FastifyRequest, reply: FastifyReply, err: AppError): never {
  recordOutcome(ctx, req, reply, 'invalid_key', undefined);
  throw err;
}

/** Tells the application the outcome and puts it on the request's log lines. */
function recordOutcome(
  ctx: KeyedContext,
  req: FastifyRequest,
  reply: FastifyReply,
  outcome: Outcome,
  span: Span | undefined,
): void {
  spanOutcome(span, outcome);
  ctx.options.onEvent({ type: 'outcome', route: ctx.route.operationId, outcome, request: req });
  const child = req.log.child({ idempotency_outcome: outcome });
  req.log = child;
  reply.log = child;
}

/**
 * Answers from the key's row: the stored answer, 422 for another request, or 409.
 *
 * @param source where the row came from: the store's memory, or the
 *   database (the attempt's insert met it).
 */
function answerFromRow(
  ctx: KeyedContext,
  req: FastifyRequest,
  reply: FastifyReply,
  state: KeyedState,
  entry: IdempotencyEntry,
  span: Span,
  source: 'memory' | 'row',
): FastifyReply {
  const answer = answerFromEntry(entry, state.sha256);
  recordOutcome(ctx, req, reply, answer.outcome, span);
  if (answer.outcome === 'replayed') {
    const stored = answer.entry;
    return inSpanSync(SPANS.replay, { [ATTRIBUTES.replaySource]: source }, () =>
      sendAnswer(reply, ctx.route, stored, 'replay'),
    );
  }
  return sendProblem(reply, answer.problem, req.id, {
    mark: answer.replay ? 'replay' : 'none',
  });
}

/**
 * The handler's place: takes the key's turn in this process (409 when the
 * wait runs out), runs the attempt, answers what it decided, then gives
 * the turn to the next duplicate.
 */
async function inTurn(
  ctx: KeyedContext,
  req: FastifyRequest,
  reply: FastifyReply,
  state: KeyedState,
  span: Span,
  handler: () => unknown,
): Promise<FastifyReply> {
  const { options, route } = ctx;
  // The turn is taken outside any span callback, so nothing tracing does
  // can come between taking it and the finally below that gives it back.
  const waited = startSpan(SPANS.keyWait, activeContext());
  const acquired = await ctx.flights.acquire(`${state.principalId}/${state.key}`, options.waitMs);
  waited({
    [ATTRIBUTES.keyWaitWaited]: acquired.waited,
    [ATTRIBUTES.keyWaitResult]: acquired.turn === null ? 'timeout' : 'turn',
  });
  if (acquired.waited) {
    options.onEvent({
      type: 'key_wait',
      route: route.operationId,
      seconds: acquired.waitedSeconds,
    });
  }
  const turn = acquired.turn;
  if (turn === null) {
    recordOutcome(ctx, req, reply, 'in_progress', span);
    return sendProblem(reply, inProgressProblem(), req.id);
  }
  try {
    const baseHeaders = { ...reply.getHeaders() };
    const guard: Guard = { active: false };
    const decision = await runAttempt(
      attemptInput(ctx, req, reply, state, handler, baseHeaders, guard),
      route.operationId,
    );
    // The attempt is over; a handler still running (its transaction
    // died under it) must not keep the plugin from answering.
    guard.active = false;
    return await respond(ctx, req, reply, state, decision, baseHeaders, span);
  } finally {
    turn.release();
  }
}

/** What the attempt runs for this request: its key, and the handler around which the reply is reset and captured. */
function attemptInput(
  ctx: KeyedContext,
  req: FastifyRequest,
  reply: FastifyReply,
  state: KeyedState,
  handler: () => unknown,
  baseHeaders: Readonly<Record<string, unknown>>,
  guard: Guard,
): AttemptInput {
  const { options, route } = ctx;
  const pristineBody: unknown = cloneBody(req.body);
  let attempts = 0;
  return {
    store: options.store,
    transaction: options.transaction,
    request: {
      principalId: state.principalId,
      key: state.key,
      action: route.operationId,
      sha256: state.sha256,
      ttlMs: options.ttlMs,
    },
    now: () => options.clock.now(),
    oneTimeSecret: route.oneTimeSecret,
    prepare: () => {
      reply.code(200);
      // The first attempt has the request as it came; a retry keeps
      // nothing of an earlier attempt.
      if (attempts++ === 0) return;
      for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
      for (const [name, value] of Object.entries(baseHeaders))
        if (value !== undefined) reply.header(name, value);
      req.body = cloneBody(pristineBody);
      clearOneTimeSecret();
    },
    invoke: async () => {
      try {
        if (req.validationError) throw req.validationError;
        const payload = await withSendRefused(reply, guard, async () => await handler());
        return capturePayload(reply, payload);
      } catch (err) {
        if (isRetryable(err)) throw err;
        const appError = options.toProblem(err);
        if (appError.status >= 500) req.log.error({ err }, 'keyed request failed');
        return captureProblem(appError, req.id);
      }
    },
    onKeyWait: (seconds) => {
      options.onEvent({ type: 'key_wait', route: route.operationId, seconds });
    },
  };
}

/** Sends what the attempt decided, and records its outcome. */
function respond(
  ctx: KeyedContext,
  req: FastifyRequest,
  reply: FastifyReply,
  state: KeyedState,
  decision: Decision,
  baseHeaders: Readonly<Record<string, unknown>>,
  span: Span,
): FastifyReply {
  const { route } = ctx;
  switch (decision.kind) {
    case 'stored':
      recordOutcome(ctx, req, reply, 'stored', span);
      // A stored answer leaves with exactly the headers its replay will
      // have: those of the current request (correlation id, rate limit)
      // and those derived from the route; headers the handler set are dropped.
      for (const name of Object.keys(reply.getHeaders())) {
        if (!(name in baseHeaders)) reply.removeHeader(name);
      }
      return sendAnswer(
        reply,
        route,
        { ...decision.answer, resourceId: decision.resourceId },
        'first',
      );
    case 'existing':
      return answerFromRow(ctx, req, reply, state, decision.entry, span, 'row');
    case 'not_stored':
      recordOutcome(ctx, req, reply, 'not_stored', span);
      for (const [name, value] of Object.entries(decision.answer.headers))
        reply.header(name, value);
      return sendAnswer(reply, route, { ...decision.answer, resourceId: null }, 'none');
    case 'in_progress':
      recordOutcome(ctx, req, reply, 'in_progress', span);
      return sendProblem(reply, inProgressProblem(), req.id);
    case 'commit_failed':
      recordOutcome(ctx, req, reply, 'commit_failed', span);
      return sendProblem(reply, commitFailedProblem(ctx, req, decision.error), req.id);
    case 'failed': {
      recordOutcome(ctx, req, reply, 'not_stored', span);
      const appError = ctx.options.toProblem(decision.error);
      if (appError.status >= 500) req.log.error({ err: decision.error }, 'keyed request failed');
      return sendProblem(reply, appError, req.id);
    }
  }
}

/** The problem of an answer that was stored and whose COMMIT failed, logged. */
function commitFailedProblem(ctx: KeyedContext, req: FastifyRequest, error: unknown): AppError {
  const lost = ctx.options.toProblem(error);
  if (lost.code === 'commit_outcome_unknown') {
    // The COMMIT was sent and its answer lost: the effect and its key row
    // may both have committed. A repeat with the key finds out.
    req.log.error({ err: error }, 'the commit of a keyed request has no answer');
    return new AppError('commit_outcome_unknown', lost.detail, {
      retryAfterSeconds: 1,
      ...(lost.hint === undefined ? {} : { hint: lost.hint }),
    });
  }
  // PostgreSQL refused the commit: nothing happened, nothing is stored.
  req.log.error({ err: error }, 'commit of a keyed request failed');
  return new AppError('internal_error', 'An unexpected error occurred.');
}
