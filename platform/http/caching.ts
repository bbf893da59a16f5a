/**
 * Caching of answers: what may never be stored by a cache (docs/DECISIONS.md).
 */
import type { onSendHookHandler } from 'fastify';

/** Routes of the API document and its UI, which keep @fastify/static's own caching. */
const DOCS_ROUTES = '/docs';

/**
 * The server's `onSend` hook: `Cache-Control: no-store` on every answer but
 * the API document's. Every answer, a problem or a replay included, passes
 * onSend: the one place where no route or plugin can reset the header away.
 * API answers carry principals' data and one-time secrets (a new token);
 * probes say what is true now. The decision is made by the route that
 * answers, not the URL as sent: the router decodes `/%61pi/...` to
 * `/api/...`, which a test of the raw URL would miss. Unmatched requests
 * (404s) get it too: no-store is the default, the API document the exception.
 *
 * @param req the request.
 * @param reply its reply.
 * @param payload the payload, passed on unchanged.
 * @param done Fastify's callback.
 */
export const noStoreHook: onSendHookHandler = (req, reply, payload, done) => {
  const route = req.is404 ? undefined : req.routeOptions.url;
  if (route === undefined || !route.startsWith(DOCS_ROUTES)) {
    reply.header('cache-control', 'no-store');
  }
  done(null, payload);
};
