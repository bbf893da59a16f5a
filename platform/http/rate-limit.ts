/**
 * Stages 3 and 4 of the request path, authentication then rate limit, in one
 * app-level onRequest hook, so they run before every route-level onRequest
 * hook. A refused token is counted before it is answered: a caller without
 * a valid token is limited by its address (token guessing, anonymous
 * floods, unknown paths), a principal by its id. Only the probes
 * (`config.rateLimit: false`) are exempt: a load balancer polls from one
 * address.
 */
import type { FastifyInstance } from 'fastify';
import rateLimit, { normalizeIP } from '@fastify/rate-limit';
import type { Authenticator } from '../../kernel/actor/index.js';
import type { Clock } from '../../kernel/clock/index.js';
import { currentContext } from '../../kernel/context/index.js';
import { problem, type AppError } from '../../kernel/errs/index.js';
import { authenticationHook, authModeOf } from './auth.js';

/**
 * Counters each rate-limit store keeps (an LRU): about 100 bytes each, so
 * 100,000 cost about 10 MB a store.
 */
export const RATE_LIMIT_ENTRIES = 100_000;

/**
 * The `429 rate_limited` problem, with Retry-After.
 *
 * @param ttlMs how long until the window ends.
 * @returns the problem.
 */
function rateLimited(ttlMs: number): AppError {
  return problem('rate_limited', 'Too many requests; slow down.', {
    retryAfterSeconds: Math.max(1, Math.ceil(ttlMs / 1000)),
    hint: 'Wait for the time in Retry-After, then repeat the request (with the same Idempotency-Key, if any).',
  });
}

/** Whether an authentication refusal is a 401 (a token refused), not a fault. */
function isUnauthenticated(refusal: Error | undefined): boolean {
  return (refusal as { code?: unknown } | undefined)?.code === 'unauthenticated';
}

/** What {@link registerAuthenticationAndRateLimit} needs. */
export interface AuthenticationAndRateLimitOptions {
  /** Resolves bearer tokens (the identity module). */
  readonly authenticator: Authenticator;
  /** The kernel clock, for token expiry. */
  readonly clock: Clock;
  /** Requests per window per principal (or address, without a valid token). */
  readonly rateLimit: { readonly max: number; readonly windowMs: number };
}

/**
 * Registers @fastify/rate-limit (adding no hooks of its own) and the one
 * hook that authenticates, then counts, every request.
 *
 * @param app the server, before its routes are added.
 * @param options the authenticator, the clock and the limit.
 */
export async function registerAuthenticationAndRateLimit(
  app: FastifyInstance,
  options: AuthenticationAndRateLimitOptions,
): Promise<void> {
  // Stage 4's limiter, registered before the hook that runs it: the plugin
  // adds no hooks of its own (global: false), so one app-level hook decides
  // for every request, unmatched paths and refused tokens included.
  await app.register(rateLimit, {
    global: false,
    max: options.rateLimit.max,
    timeWindow: options.rateLimit.windowMs,
    enableDraftSpec: true,
    keyGenerator: (req) => {
      const actor = currentContext()?.actor;
      return actor?.kind === 'principal'
        ? `principal:${actor.principalId}`
        : `address:${normalizeIP(req.ip)}`;
    },
    errorResponseBuilder: (_req, context) => rateLimited(context.ttl),
  });
  // Principals and addresses count in stores of their own, each an LRU of
  // RATE_LIMIT_ENTRIES: requests from many addresses evict addresses only,
  // never a principal's counter (in one shared store 5,000 addresses
  // evicted and so reset them).
  const byPrincipal = app.rateLimit({ cache: RATE_LIMIT_ENTRIES });
  const byAddress = app.rateLimit({ cache: RATE_LIMIT_ENTRIES });
  // Refused tokens per address, a bucket of its own: once it is full, a
  // request with a token is refused before any lookup, so guessing costs
  // the database nothing and a valid guess is not told apart by its answer.
  const refusedTokens = app.createRateLimit({
    keyGenerator: (req) => `refused:${normalizeIP(req.ip)}`,
    cache: RATE_LIMIT_ENTRIES,
  } as Parameters<typeof app.createRateLimit>[0]);

  const authenticate = authenticationHook(options.authenticator, options.clock);
  app.addHook('onRequest', async (req, reply) => {
    const limited = req.routeOptions.config.rateLimit !== false;
    const credentials = authModeOf(req) !== 'none' && req.headers.authorization !== undefined;
    if (limited && credentials) {
      const seen = await refusedTokens(req, { increment: false });
      if (!seen.isAllowed && seen.remaining === 0) throw rateLimited(seen.ttl);
    }
    const refusal = await authenticate(req).then(
      () => undefined,
      (err: unknown) => (err instanceof Error ? err : new Error(String(err))),
    );
    if (limited && credentials && isUnauthenticated(refusal)) await refusedTokens(req);
    if (limited) {
      const limit = currentContext()?.actor.kind === 'principal' ? byPrincipal : byAddress;
      await limit.call(app, req, reply);
    }
    if (refusal !== undefined) throw refusal;
  });
}
