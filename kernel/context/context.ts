import { AsyncLocalStorage } from 'node:async_hooks';
import { anonymous } from '../actor/index.js';
import type { Actor } from '../actor/index.js';

/**
 * What the code serving one request knows about it without being passed it:
 * held in AsyncLocalStorage for the request's whole asynchronous chain.
 */
export interface RequestContext {
  /** The request's correlation id, echoed on the response and in problem bodies. */
  readonly correlationId: string;
  /**
   * Who makes the request. Mutable because the context exists before
   * authentication has run; change it with {@link setActor}.
   */
  actor: Actor;
  /**
   * Markers that parts of the request leave for later stages, such as the
   * idempotency port noting that an answer carries a one-time secret. The set
   * itself is shared by the whole request, so a marker set in a nested call is
   * seen by the stage that called it.
   */
  readonly flags: Set<string>;
}

const storage = new AsyncLocalStorage<RequestContext>();

const NO_CONTEXT = 'no request context: the call is not inside a request';

/**
 * Creates a context for a new request.
 *
 * @param correlationId - the request's correlation id.
 * @param actor - who makes the request; anonymous until authentication says otherwise.
 * @returns a new context with an empty set of flags.
 */
export function newRequestContext(correlationId: string, actor: Actor = anonymous): RequestContext {
  return { correlationId, actor, flags: new Set() };
}

/**
 * Runs a function with a context current for it and everything it starts,
 * awaits and timers included. The previous context (if any) is current again
 * once the function returns; for an async function that is when it returns
 * its promise, while the context stays with the work the promise stands for.
 *
 * @param ctx - the context to make current.
 * @param fn - the function to run.
 * @returns what `fn` returns.
 * @throws whatever `fn` throws.
 */
export function runWithContext<T>(ctx: RequestContext, fn: () => T): T {
  return storage.run(ctx, fn);
}

/**
 * Makes a context current for the rest of the current synchronous execution
 * and whatever it schedules from now on, without a function to wrap. Meant for
 * hooks in callback style (Fastify's `onRequest(req, reply, done)`), where the
 * rest of the request runs after the hook returns. Prefer
 * {@link runWithContext} wherever the work can be wrapped: this one replaces
 * the context of the caller's own chain too.
 *
 * @param ctx - the context to make current.
 */
export function enterContext(ctx: RequestContext): void {
  storage.enterWith(ctx);
}

/**
 * Tells the current request context.
 *
 * @returns the context, or undefined outside a request (start-up, jobs).
 */
export function currentContext(): RequestContext | undefined {
  return storage.getStore();
}

/**
 * Tells the current request context, for code that only makes sense inside a
 * request.
 *
 * @returns the context.
 * @throws {Error} when no context is current: a wiring bug, not bad input.
 */
export function requireContext(): RequestContext {
  const ctx = storage.getStore();
  if (ctx === undefined) {
    throw new Error(NO_CONTEXT);
  }
  return ctx;
}

/**
 * Replaces the actor of the current context: the authentication stage calls
 * it once it knows who is calling. The context object is changed in place, so
 * every part of the request sees the new actor.
 *
 * @param actor - the new actor.
 * @throws {Error} when no context is current.
 */
export function setActor(actor: Actor): void {
  requireContext().actor = actor;
}
