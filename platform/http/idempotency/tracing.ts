/**
 * The plugin's OpenTelemetry spans, through `@opentelemetry/api` only: with
 * no SDK registered every call is the API's no-op, so an application that
 * does not trace pays nearly nothing, and one that does sees what a key did
 * (docs/operations/tracing.md names every span and attribute).
 *
 * - `idempotency`: one per keyed request that reached the plugin's answer,
 *   with its outcome, operation, route and status. Its children:
 * - `idempotency.key_wait`: the wait for the key's turn in this process;
 * - `idempotency.attempt`: each attempt in the unit of work (the first and
 *   every retry), with how it ended and, for a retry, the SQLSTATE;
 * - `idempotency.commit`: from the attempt's decision to keep to the end of
 *   its COMMIT;
 * - `idempotency.replay`: a stored answer sent again, from memory or from
 *   the key's row.
 *
 * No span or attribute carries the key, a body or a token.
 */
import {
  context,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { errorType, isSqlState } from '../../../kernel/errs/index.js';
import type { Outcome } from './outcome.js';

/** The tracer's name (the package's): what an SDK's view or sampler selects on. */
export const TRACER_NAME = 'fastify-idempotency';

/** The plugin's span names. */
export const SPANS = {
  request: 'idempotency',
  keyWait: 'idempotency.key_wait',
  attempt: 'idempotency.attempt',
  commit: 'idempotency.commit',
  replay: 'idempotency.replay',
} as const;

/** The attributes the plugin sets; the `http.*` and `error.type` ones are OpenTelemetry's. */
export const ATTRIBUTES = {
  outcome: 'idempotency.outcome',
  operation: 'idempotency.operation',
  route: 'http.route',
  status: 'http.response.status_code',
  keyWaitResult: 'idempotency.key_wait.result',
  keyWaitWaited: 'idempotency.key_wait.waited',
  attemptNumber: 'idempotency.attempt.number',
  attemptResult: 'idempotency.attempt.result',
  commitResult: 'idempotency.commit.result',
  replaySource: 'idempotency.replay.source',
  errorType: 'error.type',
  sqlState: 'db.response.status_code',
} as const;

/**
 * The tracer, asked for at each span: the API caches the first provider's
 * tracer in a tracer kept across spans, and an application (or its tests)
 * that registers a second provider after shutting the first down would
 * still feed the first.
 */
function tracer(): Tracer {
  return trace.getTracer(TRACER_NAME);
}

/** Ends a span; a span processor that throws must never change an answer. */
function endQuietly(span: Span): void {
  try {
    span.end();
  } catch {
    // The SDK's processors are the application's: their failure is not the request's.
  }
}

/**
 * Runs `fn` in a new span made the active one (so spans made inside, a
 * handler's statements included, are its children), and ends the span when
 * `fn` settles. A rejection is recorded on the span (its `error.type` the
 * error's SQLSTATE or name) and rethrown.
 *
 * @param name the span's name.
 * @param attributes its attributes at the start.
 * @param fn what runs in it; it may set more attributes on the span.
 * @returns what `fn` returns.
 */
export function inSpan<T>(
  name: string,
  attributes: Attributes,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  return tracer().startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      endQuietly(span);
    }
  });
}

/**
 * Runs a synchronous `fn` in a new active span and ends it on return.
 *
 * @param name the span's name.
 * @param attributes its attributes.
 * @param fn what runs in it.
 * @returns what `fn` returns.
 */
export function inSpanSync<T>(name: string, attributes: Attributes, fn: (span: Span) => T): T {
  return tracer().startActiveSpan(name, { attributes }, (span) => {
    try {
      return fn(span);
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      endQuietly(span);
    }
  });
}

/**
 * A span for a stretch that begins in one place and ends in another (the
 * COMMIT: it begins when an attempt decides to keep its writes, inside the
 * attempt's span, and ends when the unit of work's commit settles), made a
 * child of `parent` rather than of the span active where it begins.
 *
 * @param name the span's name.
 * @param parent the context whose span is its parent.
 * @returns a function that ends it with its attributes and, if it ended in
 *   one, an error; safe to call twice (the second call does nothing).
 */
export function startSpan(
  name: string,
  parent: Context,
): (attributes: Attributes, failed?: unknown) => void {
  const span = tracer().startSpan(name, {}, parent);
  let ended = false;
  return (attributes, failed) => {
    if (ended) return;
    ended = true;
    span.setAttributes(attributes);
    if (failed !== undefined) failSpan(span, failed);
    endQuietly(span);
  };
}

/** The active context, to parent a span begun later under what is active now. */
export function activeContext(): Context {
  return context.active();
}

/**
 * Puts a keyed request's outcome on its span.
 *
 * @param span the `idempotency` span, if the request has one.
 * @param outcome the outcome.
 */
export function spanOutcome(span: Span | undefined, outcome: Outcome): void {
  span?.setAttribute(ATTRIBUTES.outcome, outcome);
}

function failSpan(span: Span, err: unknown): void {
  const type = errorType(err);
  span.setAttribute(ATTRIBUTES.errorType, type);
  if (isSqlState(type)) span.setAttribute(ATTRIBUTES.sqlState, type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type });
}
