/**
 * The request fingerprint stored with a key (`request_sha256`): a repeat with
 * another fingerprint is `422 idempotency_key_reuse`.
 *
 * SHA-256 over, joined by `\n`:
 * 1. the upper-case method;
 * 2. the request path exactly as received (the raw URL up to `?`);
 * 3. the preconditions, as the JSON array `[If-Match, If-None-Match]` with
 *    null for a header not sent, so a retry with a refreshed precondition is
 *    another request;
 * 4. the body: its RFC 8785 form when it is JSON without duplicate member
 *    names, else its raw bytes; empty when there is none.
 * No part but the body can hold a newline (the JSON array escapes any), so
 * the joined form is unambiguous.
 */
import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { canonicalBody } from './canonical.js';
import { FST_IDEMPOTENCY_HANDLER_CONTRACT } from './errors.js';
import { bodyBytesOf } from './request-state.js';

/** What the fingerprint is computed from. */
export interface FingerprintInput {
  readonly method: string;
  /** The raw request URL (path and query as received). */
  readonly rawUrl: string;
  readonly ifMatch: string | undefined;
  readonly ifNoneMatch: string | undefined;
  /** The body bytes as received, or undefined. */
  readonly body: Buffer | undefined;
}

/**
 * Computes the fingerprint.
 *
 * @param input method, raw URL, precondition headers and body bytes.
 * @returns 32 bytes.
 */
export function fingerprint(input: FingerprintInput): Buffer {
  const q = input.rawUrl.indexOf('?');
  const path = q === -1 ? input.rawUrl : input.rawUrl.slice(0, q);
  const preconditions = JSON.stringify([input.ifMatch ?? null, input.ifNoneMatch ?? null]);
  return createHash('sha256')
    .update(`${input.method.toUpperCase()}\n${path}\n${preconditions}\n`, 'utf8')
    .update(canonicalBody(input.body).bytes)
    .digest();
}

/**
 * The fingerprint of a keyed request as received: its method, raw URL,
 * preconditions and the body bytes its preParsing hook kept.
 *
 * @param req the request.
 * @returns 32 bytes.
 * @throws FST_IDEMPOTENCY_HANDLER_CONTRACT when the request has a body
 *   whose bytes were not kept (the plugin's preParsing hook was bypassed).
 */
export function requestFingerprint(req: FastifyRequest): Buffer {
  const ifMatch = req.headers['if-match'];
  const ifNoneMatch = req.headers['if-none-match'];
  const chunks = bodyBytesOf(req);
  if (chunks === null && req.body !== undefined) {
    // Never a fingerprint without its body: a route whose preParsing hook
    // was bypassed must fail loudly, not replay another body's answer.
    throw new FST_IDEMPOTENCY_HANDLER_CONTRACT(
      'a body the plugin saw (its preParsing hook did not run)',
    );
  }
  return fingerprint({
    method: req.method,
    rawUrl: req.raw.url ?? req.url,
    ifMatch: Array.isArray(ifMatch) ? ifMatch.join(', ') : ifMatch,
    ifNoneMatch: Array.isArray(ifNoneMatch) ? ifNoneMatch.join(', ') : ifNoneMatch,
    body: chunks === null ? undefined : Buffer.concat(chunks),
  });
}
