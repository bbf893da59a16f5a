/**
 * The plugin's writer of keyed answers: stored answers and replays as
 * canonical bytes with the headers derived from the route, the plugin's own
 * problems as RFC 9457 problem+json in canonical bytes, and what an existing
 * key row answers. The application writes its other problems itself.
 */
import type { FastifyReply } from 'fastify';
import { problem, toProblemBody, type AppError } from '../../../kernel/errs/index.js';
import type { Id } from '../../../kernel/ids/index.js';
import type { IdempotencyEntry } from '../../../kernel/idempotency/index.js';
import { canonicalJson } from './canonical.js';
import type { KeyedRoute } from './checks.js';
import type { Outcome } from './outcome.js';

/** Content type of JSON answers of keyed routes. */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';
/** Content type of every problem answer. */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';
/**
 * The response header that marks the answer of a key: `false` on the first
 * answer, which was stored under the key in the transaction of its effect,
 * `true` on that stored answer given again. An answer without it was not
 * stored (in progress, key reuse, 401, 429, 5xx, a refusal before the plugin
 * or from a gateway): a client cannot read from it whether an earlier attempt
 * took effect.
 */
export const REPLAY_HEADER = 'idempotent-replay';

/**
 * The response header that tells how long the server keeps a key:
 * `Idempotency-Key-Lifetime: 86400`, whole seconds (an RFC 8941 integer)
 * from the server's first sight of the key, after which a repeat under it
 * runs as a new request. Sent on every answer of a keyed request and on
 * routes that declare `config.announceKeyLifetime`.
 */
export const KEY_LIFETIME_HEADER = 'idempotency-key-lifetime';

/**
 * The value of {@link KEY_LIFETIME_HEADER} for a key lifetime.
 *
 * @param ttlMs how long a key lives, in milliseconds.
 * @returns the whole seconds, rounded down (a client that reads it stops
 *   sending a key no later than the server forgets it).
 */
export function keyLifetimeValue(ttlMs: number): string {
  return String(Math.floor(ttlMs / 1000));
}

/** How an answer relates to its key: see {@link REPLAY_HEADER}. */
export type KeyMark = 'first' | 'replay' | 'none';

function markKey(reply: FastifyReply, mark: KeyMark | undefined): void {
  if (mark === 'first') reply.header(REPLAY_HEADER, 'false');
  else if (mark === 'replay') reply.header(REPLAY_HEADER, 'true');
}

/**
 * Sends a keyed route's answer as the RFC 8785 canonical bytes of its JSON
 * value, with `Location` (201, rebuilt from the resource id and the route's
 * template) and `ETag` (the body's `version`, when the route declares one for
 * the status): the same bytes and headers for the first answer and every
 * replay, apart from the value of `Idempotent-Replay`.
 *
 * @param reply the reply.
 * @param route the keyed route.
 * @param answer status, JSON body (null for none) and the created resource's id.
 * @param mark `first` for the answer just stored, `replay` for a stored
 *   answer given again, `none` for an answer not stored.
 * @returns the reply, sent.
 */
export function sendAnswer(
  reply: FastifyReply,
  route: KeyedRoute,
  answer: { readonly status: number; readonly body: unknown; readonly resourceId: Id | null },
  mark: KeyMark,
): FastifyReply {
  const { status, body, resourceId } = answer;
  reply.code(status);
  markKey(reply, mark);
  if (status === 201 && route.location !== undefined && resourceId !== null) {
    reply.header('location', route.location.replace('{id}', resourceId));
  }
  if (body === null || body === undefined) return reply.send();
  if (route.etagStatuses.has(status) && typeof body === 'object') {
    const version = (body as Record<string, unknown>)['version'];
    if (Number.isInteger(version)) reply.header('etag', `"${String(version)}"`);
  }
  return reply
    .type(status >= 400 ? PROBLEM_CONTENT_TYPE : JSON_CONTENT_TYPE)
    .send(canonicalJson(body));
}

/** How {@link sendProblem} writes a problem. */
export interface ProblemOptions {
  /** How it relates to its key: `replay` adds `Idempotent-Replay: true`. Default `none`. */
  readonly mark?: KeyMark;
}

/**
 * Sends a problem of a keyed request: its status, `Retry-After` and extra
 * headers, and the RFC 9457 body with the request's correlation id, in
 * canonical bytes as every answer of a keyed request is.
 *
 * @param reply the reply.
 * @param err the problem.
 * @param correlationId the request's correlation id.
 * @param options the replay marker.
 * @returns the reply, sent.
 */
export function sendProblem(
  reply: FastifyReply,
  err: AppError,
  correlationId: string,
  options: ProblemOptions = {},
): FastifyReply {
  if (err.retryAfterSeconds !== undefined)
    reply.header('retry-after', String(err.retryAfterSeconds));
  for (const [name, value] of Object.entries(err.headers ?? {})) reply.header(name, value);
  markKey(reply, options.mark);
  const body = toProblemBody(err, correlationId);
  reply.code(err.status).type(PROBLEM_CONTENT_TYPE);
  return reply.send(canonicalJson(body));
}

/** `409 request_in_progress` with `Retry-After: 1`. */
export function inProgressProblem(): AppError {
  return problem(
    'request_in_progress',
    'The first request with this Idempotency-Key is still running.',
    { retryAfterSeconds: 1, hint: 'Repeat the request with the same key after Retry-After.' },
  );
}

/** What an existing key row answers. */
export type ExistingAnswer =
  | { readonly outcome: 'replayed'; readonly entry: IdempotencyEntry }
  | {
      readonly outcome: Exclude<Outcome, 'replayed'>;
      readonly problem: AppError;
      /** Whether it carries `Idempotent-Replay: true`. */
      readonly replay: boolean;
    };

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return (
    Buffer.compare(
      Buffer.from(a.buffer, a.byteOffset, a.byteLength),
      Buffer.from(b.buffer, b.byteOffset, b.byteLength),
    ) === 0
  );
}

/**
 * Whether a stored 2xx body is the marker kept for an answer that carried a
 * one-time secret.
 *
 * @param body the stored body.
 * @returns true for `{"one_time_secret": true}`.
 */
export function isSecretMarker(body: unknown): boolean {
  return (
    typeof body === 'object' &&
    body !== null &&
    Object.keys(body).length === 1 &&
    (body as Record<string, unknown>)['one_time_secret'] === true
  );
}

/**
 * Decides what an existing row answers a request with this fingerprint:
 * in progress (defensive: a committed row is completed), another request
 * under the key (422), a repeat of a one-time secret (409, marked as a
 * replay), or the stored answer again.
 *
 * @param entry the row.
 * @param sha256 the request's fingerprint.
 * @returns the outcome and what to send.
 */
export function answerFromEntry(entry: IdempotencyEntry, sha256: Uint8Array): ExistingAnswer {
  if (!entry.completed) {
    return { outcome: 'in_progress', problem: inProgressProblem(), replay: false };
  }
  if (!sameBytes(entry.sha256, sha256)) {
    return {
      outcome: 'reused',
      replay: false,
      problem: problem(
        'idempotency_key_reuse',
        'This Idempotency-Key was used for a different request.',
        { hint: 'Use a new key for a new request; repeat a request only with its own key.' },
      ),
    };
  }
  if (entry.status >= 200 && entry.status < 300 && isSecretMarker(entry.body)) {
    return {
      outcome: 'secret_repeat',
      replay: true,
      problem: problem(
        'conflict',
        'The answer to this request carried a one-time secret, which is never stored or shown again.',
        { reason: 'one_time_secret', hint: 'Create a new one with a new Idempotency-Key.' },
      ),
    };
  }
  return { outcome: 'replayed', entry };
}
