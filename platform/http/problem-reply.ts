/**
 * The server's writer of problem answers (RFC 9457 problem+json), kept in
 * platform/http so the server needs nothing of the idempotency plugin to
 * answer a problem; the plugin writes its own keyed answers.
 */
import type { FastifyReply } from 'fastify';
import { toProblemBody, type AppError } from '../../kernel/errs/index.js';

/** The Content-Type of every problem answer. */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

/**
 * Sends an {@link AppError} as problem+json: its status, `Retry-After` and
 * extra headers, and the RFC 9457 body with the request's correlation id,
 * through the route's serializer.
 *
 * @param reply the reply.
 * @param err the problem.
 * @param correlationId the request's correlation id.
 * @returns the reply, sent.
 */
export function sendProblem(
  reply: FastifyReply,
  err: AppError,
  correlationId: string,
): FastifyReply {
  if (err.retryAfterSeconds !== undefined)
    reply.header('retry-after', String(err.retryAfterSeconds));
  for (const [name, value] of Object.entries(err.headers ?? {})) reply.header(name, value);
  reply.code(err.status).type(PROBLEM_CONTENT_TYPE);
  return reply.send(toProblemBody(err, correlationId));
}
