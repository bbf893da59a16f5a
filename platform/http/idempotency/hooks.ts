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
 *   the decision, so only after the commit.
 */
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
import { runAttempt, type Decision } from './attempt.js';
import { cloneBody } from './clone.js';
import { capturePayload, captureProblem, withSendRefused, type Guard } from './capture.js';
import { FST_IDEMPOTENCY_HANDLER_CONTRACT, FST_IDEMPOTENCY_INVALID_OPTION } from './errors.js';
import type { KeyedRoute } from './checks.js';
import { fingerprint } from './fingerprint.js';
import { hasKeyHeader, KEY_HEADER, readKeyHeader } from './key.js';
import { keepBytes } from './raw-body.js';
import type { ResolvedOptions } from './options.js';
import type { Outcome } from './outcome.js';
import {
  bodyBytesOf,
  keyedStateOf,
  setBodyBytes,
  setKeyedState,
  type KeyedState,
} from './request-state.js';
import type { SingleFlight } from './single-flight.js';

const KEY_HINT =
  'Send a UUIDv7 (for example 0190f2a4-1b2c-7d3e-8f40-123456789abc), bare or in double quotes.';

/** The hooks and the handler wrapper of one keyed route. */
export interface KeyedHooks {
  readonly preParsing: preParsingAsyncHookHandler;
  readonly preValidation: preValidationAsyncHookHandler;
  wrap(handler: RouteHandlerMethod): RouteHandlerMethod;
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
  const { store, clock } = options;

  /** The owner of the request's keys, or null for an anonymous caller. */
  const ownerOf = (req: FastifyRequest): string | null => {
    // Typed, but a JavaScript caller may return anything: checked here.
    const owner: unknown = options.scope(req);
    if (owner === null || owner === undefined) return null;
    if (typeof owner !== 'string' || owner === '') {
      throw new FST_IDEMPOTENCY_INVALID_OPTION(
        'scope',
        `returned ${owner === '' ? 'an empty string' : typeof owner}; it must return the owner's id or null`,
      );
    }
    return owner;
  };

  const record = (req: FastifyRequest, reply: FastifyReply, outcome: Outcome): void => {
    options.onEvent({ type: 'outcome', route: route.operationId, outcome, request: req });
    const child = req.log.child({ idempotency_outcome: outcome });
    req.log = child;
    reply.log = child;
  };

  const answerExisting = (
    req: FastifyRequest,
    reply: FastifyReply,
    state: KeyedState,
    entry: IdempotencyEntry,
  ): FastifyReply => {
    const answer = answerFromEntry(entry, state.sha256);
    record(req, reply, answer.outcome);
    if (answer.outcome === 'replayed') return sendAnswer(reply, route, answer.entry, 'replay');
    return sendProblem(reply, answer.problem, req.id, {
      mark: answer.replay ? 'replay' : 'none',
    });
  };

  const refuse = (req: FastifyRequest, reply: FastifyReply, err: AppError): never => {
    record(req, reply, 'invalid_key');
    throw err;
  };

  const preParsing: preParsingAsyncHookHandler = async (req, _reply, payload) => {
    // Whenever a key is sent, owner or not yet: who the caller is may be
    // settled only by a later hook, and the fingerprint must never lose the body.
    if (!hasKeyHeader(req.raw.rawHeaders)) return payload;
    const { stream, chunks } = keepBytes(payload);
    setBodyBytes(req, chunks);
    return Promise.resolve(stream);
  };

  const preValidation: preValidationAsyncHookHandler = async (req, reply) => {
    // Keys belong to their owner: an anonymous caller's key is ignored.
    const owner = ownerOf(req);
    if (owner === null) return;
    const header = readKeyHeader(req.raw.rawHeaders);
    if (header.kind === 'absent') {
      if (!route.required) return;
      refuse(
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
        req,
        reply,
        problem('validation_failed', `The ${KEY_HEADER} header is not a UUIDv7.`, {
          errors: [{ pointer: `#header/${KEY_HEADER}`, code: 'invalid_format' }],
          hint: KEY_HINT,
        }),
      );
    }
    if (header.kind !== 'valid') return;
    const rawUrl = req.raw.url ?? req.url;
    if (rawUrl.includes('?')) {
      refuse(
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
    const ifMatch = req.headers['if-match'];
    const ifNoneMatch = req.headers['if-none-match'];
    const chunks = bodyBytesOf(req);
    if (chunks === null && req.body !== undefined) {
      // Never a fingerprint without its body: a route whose preParsing hook
      // was bypassed must fail loudly, not replay another body's answer.
      throw new FST_IDEMPOTENCY_HANDLER_CONTRACT(
        'a body the plugin saw (its preParsing hook did not run)',
      );
    }
    const state: KeyedState = {
      principalId: owner as Id,
      key: header.key,
      route,
      sha256: fingerprint({
        method: req.method,
        rawUrl,
        ifMatch: Array.isArray(ifMatch) ? ifMatch.join(', ') : ifMatch,
        ifNoneMatch: Array.isArray(ifNoneMatch) ? ifNoneMatch.join(', ') : ifNoneMatch,
        body: chunks === null ? undefined : Buffer.concat(chunks),
      }),
    };
    setKeyedState(req, state);
    const found = store.recall(state.principalId, state.key, clock.now());
    if (found) return answerExisting(req, reply, state, found);
  };

  /** Sends what the attempt decided, and records its outcome. */
  const respond = (
    req: FastifyRequest,
    reply: FastifyReply,
    state: KeyedState,
    decision: Decision,
    baseHeaders: Readonly<Record<string, unknown>>,
  ): FastifyReply => {
    switch (decision.kind) {
      case 'stored':
        record(req, reply, 'stored');
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
        return answerExisting(req, reply, state, decision.entry);
      case 'not_stored':
        record(req, reply, 'not_stored');
        for (const [name, value] of Object.entries(decision.answer.headers))
          reply.header(name, value);
        return sendAnswer(reply, route, { ...decision.answer, resourceId: null }, 'none');
      case 'in_progress':
        record(req, reply, 'in_progress');
        return sendProblem(reply, inProgressProblem(), req.id);
      case 'commit_failed': {
        record(req, reply, 'commit_failed');
        const lost = options.toProblem(decision.error);
        if (lost.code === 'commit_outcome_unknown') {
          // The COMMIT was sent and its answer lost: the effect and its key
          // row may both have committed. A repeat with the key finds out.
          req.log.error({ err: decision.error }, 'the commit of a keyed request has no answer');
          return sendProblem(
            reply,
            new AppError('commit_outcome_unknown', lost.detail, {
              retryAfterSeconds: 1,
              ...(lost.hint === undefined ? {} : { hint: lost.hint }),
            }),
            req.id,
          );
        }
        // PostgreSQL refused the commit: nothing happened, nothing is stored.
        req.log.error({ err: decision.error }, 'commit of a keyed request failed');
        return sendProblem(
          reply,
          new AppError('internal_error', 'An unexpected error occurred.'),
          req.id,
        );
      }
      case 'failed': {
        record(req, reply, 'not_stored');
        const appError = options.toProblem(decision.error);
        if (appError.status >= 500) req.log.error({ err: decision.error }, 'keyed request failed');
        return sendProblem(reply, appError, req.id);
      }
    }
  };

  const wrap = (original: RouteHandlerMethod): RouteHandlerMethod =>
    async function keyedHandler(this: FastifyInstance, req, reply) {
      const state = keyedStateOf(req);
      if (state === null) {
        // Not a keyed request (no key, or an anonymous caller): a plain route.
        if (req.validationError) throw req.validationError;
        return original.call(this, req, reply);
      }
      const acquired = await flights.acquire(`${state.principalId}/${state.key}`, options.waitMs);
      if (acquired.waited) {
        options.onEvent({
          type: 'key_wait',
          route: route.operationId,
          seconds: acquired.waitedSeconds,
        });
      }
      const turn = acquired.turn;
      if (turn === null) {
        record(req, reply, 'in_progress');
        return sendProblem(reply, inProgressProblem(), req.id);
      }
      try {
        // The first request here has ended: the answer it stored is in
        // memory now (otherwise the attempt's insert meets its row).
        const found = acquired.waited
          ? store.recall(state.principalId, state.key, clock.now())
          : null;
        if (found) return await answerExisting(req, reply, state, found);
        const pristineBody: unknown = cloneBody(req.body);
        const baseHeaders = { ...reply.getHeaders() };
        const guard: Guard = { active: false };
        let attempts = 0;
        const decision = await runAttempt(
          {
            store,
            transaction: options.transaction,
            request: {
              principalId: state.principalId,
              key: state.key,
              action: route.operationId,
              sha256: state.sha256,
              ttlMs: options.ttlMs,
            },
            now: () => clock.now(),
            oneTimeSecret: route.oneTimeSecret,
            prepare: () => {
              reply.code(200);
              // The first attempt has the request as it came; a retry
              // keeps nothing of an earlier attempt.
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
                const payload = await withSendRefused(
                  reply,
                  guard,
                  async (): Promise<unknown> => await original.call(this, req, reply),
                );
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
          },
          route.operationId,
        );
        // The attempt is over; a handler still running (its transaction
        // died under it) must not keep the plugin from answering.
        guard.active = false;
        return await respond(req, reply, state, decision, baseHeaders);
      } finally {
        turn.release();
      }
    };

  return { preParsing, preValidation, wrap };
}
