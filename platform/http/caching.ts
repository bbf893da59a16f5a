/**
 * Caching of answers: what may never be stored by a cache (docs/DECISIONS.md).
 */
import type { onSendHookHandler } from 'fastify';

/**
 * Whether a request path is under the API (`/api/...`), whose answers are
 * never to be stored by a cache.
 *
 * @param url the request URL as received, query included.
 * @returns true for `/api` and everything under `/api/`.
 */
export function isApiPath(url: string): boolean {
  const path = url.split('?', 1)[0] ?? '';
  return path === '/api' || path.startsWith('/api/');
}

/** Paths whose answers say what is true now: a cached copy would mislead. */
const UNCACHEABLE_PROBES: ReadonlySet<string> = new Set(['/healthz', '/readyz']);

/**
 * The server's `onSend` hook: `Cache-Control: no-store` on every answer
 * under `/api/` and on the probes. Every answer, a problem or a replay
 * included, passes onSend: the one place where no route or plugin can reset
 * the header away. API answers carry principals' data and one-time secrets
 * (a new token); probes say what is true now. The API document and its UI
 * keep @fastify/static's validators.
 *
 * @param req the request.
 * @param reply its reply.
 * @param payload the payload, passed on unchanged.
 * @param done Fastify's callback.
 */
export const noStoreHook: onSendHookHandler = (req, reply, payload, done) => {
  if (isApiPath(req.url) || UNCACHEABLE_PROBES.has(req.url.split('?', 1)[0] ?? '')) {
    reply.header('cache-control', 'no-store');
  }
  done(null, payload);
};
