import type { PrincipalActor } from '../../kernel/actor/index.js';
import { isPrincipal } from '../../kernel/actor/index.js';
import { requireContext } from '../../kernel/context/index.js';
import { problem } from '../../kernel/errs/index.js';

/**
 * The calling principal, from the request context. Routes with
 * `auth: 'required'` run only for principals, so the check guards against
 * a wiring mistake (a route declared `optional` or `none` calling it)
 * rather than against a client.
 *
 * @returns the principal the request's token names.
 * @throws AppError `unauthenticated` (with `WWW-Authenticate: Bearer`) when the actor is anonymous.
 * @throws Error when called outside a request context.
 */
export function caller(): PrincipalActor {
  const { actor } = requireContext();
  if (!isPrincipal(actor)) {
    throw problem('unauthenticated', 'This route needs a bearer token.', {
      headers: { 'www-authenticate': 'Bearer' },
    });
  }
  return actor;
}
