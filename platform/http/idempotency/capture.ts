/**
 * Capture of a keyed handler's answer: the handler returns its payload or
 * throws, and the plugin holds the answer until the transaction has
 * committed. While the handler runs, `reply.send` and `reply.hijack` are
 * refused, since the bytes may leave only after the commit.
 */
import type { FastifyReply } from 'fastify';
import { toProblemBody, type AppError } from '../../../kernel/errs/index.js';
import { FST_IDEMPOTENCY_HANDLER_CONTRACT } from './errors.js';

/** An answer captured, not yet sent. */
export interface Captured {
  readonly status: number;
  /** The JSON value of the body, or null for an empty answer. */
  readonly body: unknown;
  /** The problem code when the answer is a problem. */
  readonly code: string | undefined;
  /** Headers of a problem (Retry-After, WWW-Authenticate): sent, never stored. */
  readonly headers: Readonly<Record<string, string>>;
}

/** Whether a captured answer is a success (2xx). */
export function isSuccess(answer: Pick<Captured, 'status'>): boolean {
  return answer.status >= 200 && answer.status <= 299;
}

/**
 * Turns a handler's returned payload into a captured answer, shaped by the
 * route's response serializer (so what is stored is what the schema lets
 * out), with the status the handler set on the reply.
 *
 * @param reply the reply (its status code and serializer).
 * @param payload what the handler returned.
 * @returns the captured answer.
 * @throws FST_IDEMPOTENCY_HANDLER_CONTRACT for a Buffer or a stream.
 */
export function capturePayload(reply: FastifyReply, payload: unknown): Captured {
  const status = reply.statusCode;
  if (payload === undefined || payload === null)
    return { status, body: null, code: undefined, headers: {} };
  if (Buffer.isBuffer(payload) || typeof (payload as { pipe?: unknown }).pipe === 'function') {
    throw new FST_IDEMPOTENCY_HANDLER_CONTRACT('a JSON value, not a Buffer or a stream');
  }
  const serialized = reply.serialize(payload);
  const text =
    typeof serialized === 'string'
      ? serialized
      : Buffer.from(serialized as ArrayBuffer).toString('utf8');
  return { status, body: JSON.parse(text) as unknown, code: undefined, headers: {} };
}

/**
 * Turns a problem into a captured answer: its body (with the request's
 * correlation id, kept when stored), and its headers, sent but never stored.
 *
 * @param appError the problem.
 * @param correlationId the request's correlation id.
 * @returns the captured answer.
 */
export function captureProblem(appError: AppError, correlationId: string): Captured {
  const headers: Record<string, string> = { ...(appError.headers ?? {}) };
  if (appError.retryAfterSeconds !== undefined)
    headers['retry-after'] = String(appError.retryAfterSeconds);
  return {
    status: appError.status,
    body: toProblemBody(appError, correlationId),
    code: appError.code,
    headers,
  };
}

/** Whether the guard of a running handler is up; lowered when the attempt ends early. */
export interface Guard {
  active: boolean;
}

/**
 * Runs a keyed handler with `reply.send` and `reply.hijack` refused. The
 * guard can be lowered early (`guard.active = false`) when the attempt ends
 * while the handler still runs (its transaction died under it), so the
 * plugin can answer at once.
 *
 * @param reply the reply.
 * @param guard the guard, raised for the run.
 * @param fn the handler's call.
 * @returns what the handler returned.
 */
export async function withSendRefused<T>(
  reply: FastifyReply,
  guard: Guard,
  fn: () => Promise<T>,
): Promise<T> {
  const proto = Object.getPrototypeOf(reply) as {
    send: FastifyReply['send'];
    hijack: FastifyReply['hijack'];
  };
  const refused = (name: 'send' | 'hijack') =>
    function (this: FastifyReply, ...args: unknown[]): unknown {
      if (guard.active) {
        throw new FST_IDEMPOTENCY_HANDLER_CONTRACT(
          'its payload or throw; it may not call reply.send or reply.hijack',
        );
      }
      return (proto[name] as (...a: unknown[]) => unknown).apply(this, args);
    };
  guard.active = true;
  for (const name of ['send', 'hijack'] as const) {
    Object.defineProperty(reply, name, {
      value: refused(name),
      configurable: true,
      writable: true,
    });
  }
  try {
    return await fn();
  } finally {
    guard.active = false;
    delete (reply as unknown as Record<string, unknown>)['send'];
    delete (reply as unknown as Record<string, unknown>)['hijack'];
  }
}
