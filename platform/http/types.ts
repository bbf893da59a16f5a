/**
 * What routes of this application declare in their Fastify `config`: who may
 * call them and how the idempotency plugin treats them. Typed by augmenting
 * Fastify's `FastifyContextConfig`, so a typo is a compile error.
 */
import type {} from '@fastify/swagger';

/** Who may call a route: `required` (default), `optional` (anonymous allowed) or `none` (public). */
export type AuthMode = 'required' | 'optional' | 'none';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Who may call the route; default `required`. */
    auth?: AuthMode;
    /**
     * Idempotency keys: `true` honours an `Idempotency-Key` header,
     * `'required'` demands one, `false` states the route is not keyed. Every
     * POST, PUT, PATCH and DELETE route must state it.
     */
    idempotent?: boolean | 'required';
    /** The route's 2xx answers carry a one-time secret: never stored. */
    oneTimeSecret?: boolean;
    /** Template such as `/api/v1/accounts/{id}` to rebuild `Location` on replay. */
    location?: string;
  }
}
