/**
 * The authentication stage (onRequest, before the body is read): resolves
 * `Authorization: Bearer <token>` through the kernel's Authenticator port and
 * puts the actor in the request context. Each route's `config.auth` decides
 * what an anonymous caller gets.
 */
import type { FastifyRequest } from 'fastify';
import type { Authenticator } from '../../kernel/actor/index.js';
import type { Clock } from '../../kernel/clock/index.js';
import { setActor } from '../../kernel/context/index.js';
import { problem, type AppError } from '../../kernel/errs/index.js';
import { countHeader } from './refusals.js';
import type { AuthMode } from './types.js';

/** RFC 6750 token68 after `Bearer `, case-insensitive scheme, one space. */
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

function unauthenticated(detail: string, error?: 'invalid_token' | 'invalid_request'): AppError {
  return problem('unauthenticated', detail, {
    headers: { 'www-authenticate': error === undefined ? 'Bearer' : `Bearer error="${error}"` },
    hint: 'Send Authorization: Bearer <token>; create a token with the principal CLI or POST /api/v1/tokens.',
  });
}

/**
 * The route's declared auth mode; unknown routes (404) need none, so an
 * anonymous caller learns "not found" rather than "unauthenticated".
 *
 * @param req the request.
 * @returns the mode.
 */
export function authModeOf(req: FastifyRequest): AuthMode {
  if (req.is404) return 'none';
  return req.routeOptions.config.auth ?? 'required';
}

/**
 * Creates the onRequest hook of the authentication stage.
 *
 * - `none` routes never look at the header.
 * - `required` and `optional` routes: a header that is present must be a
 *   valid bearer token of an enabled principal, else 401 (a bad, expired or
 *   revoked token is always 401, never treated as anonymous); two headers
 *   are a 401 `invalid_request`, whatever they hold.
 * - `required` routes answer 401 to a request without the header.
 *
 * @param authenticator the kernel port that resolves tokens.
 * @param clock the kernel clock, for expiry.
 * @returns the hook.
 */
export function authenticationHook(
  authenticator: Authenticator,
  clock: Clock,
): (req: FastifyRequest) => Promise<void> {
  return async (req) => {
    const mode = authModeOf(req);
    if (mode === 'none') return;
    // Node.js keeps the first of two Authorization headers and drops the
    // rest; a proxy in front may keep the last. Two are refused.
    if (countHeader(req.raw.rawHeaders, 'authorization') > 1) {
      throw unauthenticated('Send one Authorization header, not several.', 'invalid_request');
    }
    const header = req.headers.authorization;
    if (header === undefined) {
      if (mode === 'required') throw unauthenticated('This route needs a bearer token.');
      return;
    }
    const match = BEARER.exec(header);
    const token = match?.[1];
    if (token === undefined)
      throw unauthenticated('The Authorization header is not a bearer token.', 'invalid_request');
    const actor = await authenticator.authenticate(token, clock.now());
    if (actor === null) throw unauthenticated('The bearer token is not valid.', 'invalid_token');
    setActor(actor);
  };
}
