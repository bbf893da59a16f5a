/**
 * What routes of this application declare in their Fastify `config`: who may
 * call them (the idempotency plugin declares its own keys, `idempotent`,
 * `oneTimeSecret` and `location`, in idempotency/plugin.ts). Typed by
 * augmenting Fastify's `FastifyContextConfig`, so a typo is a compile error.
 */
import type {} from '@fastify/swagger';

/** Who may call a route: `required` (default), `optional` (anonymous allowed) or `none` (public). */
export type AuthMode = 'required' | 'optional' | 'none';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Who may call the route; default `required`. */
    auth?: AuthMode;
  }
}
