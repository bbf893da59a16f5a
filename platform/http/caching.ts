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

/**
 * Whether an `If-None-Match` value names an entity tag, by the weak
 * comparison of RFC 9110 section 13.1.2 (`W/"3"` matches `"3"`); `*`
 * matches any current representation.
 *
 * @param header the request's If-None-Match.
 * @param etag the answer's ETag.
 * @returns true when the client holds this representation.
 */
export function noneMatchHolds(header: string, etag: string): boolean {
  if (header.trim() === '*') return true;
  const opaque = (tag: string) => tag.trim().replace(/^W\//, '');
  const current = opaque(etag);
  return header.split(',').some((tag) => opaque(tag) === current);
}

/**
 * The server's `onSend` hook for conditional reads: a `200` to a GET or
 * HEAD whose `ETag` the client sent in `If-None-Match` becomes `304 Not
 * Modified` without a body (RFC 9110 section 13.1.2), keeping the ETag and
 * the other headers. Writes are not touched: on a keyed write the
 * precondition is part of the request's fingerprint, and the route decides.
 *
 * @param req the request.
 * @param reply its reply.
 * @param payload the payload, not written for a 304 (Node.js drops it).
 * @param done Fastify's callback.
 */
export const notModifiedHook: onSendHookHandler = (req, reply, payload, done) => {
  const condition = req.headers['if-none-match'];
  const etag = reply.getHeader('etag');
  if (
    (req.method === 'GET' || req.method === 'HEAD') &&
    reply.statusCode === 200 &&
    typeof condition === 'string' &&
    typeof etag === 'string' &&
    noneMatchHolds(condition, etag)
  ) {
    // Node.js writes no body for a 304, so the payload stays: Fastify then
    // sends the Content-Length a 200 would have had, which is what RFC 9110
    // section 8.6 allows (a null payload breaks Fastify's HEAD routes).
    reply.code(304);
    reply.removeHeader('content-type');
  }
  done(null, payload);
};
