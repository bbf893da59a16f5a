/**
 * How a keyed request ends: exactly one outcome per keyed request, on its
 * log line (`idempotency_outcome`) and in the plugin's `outcome` events.
 */

/** Every way a keyed request can end. */
export const OUTCOMES = [
  /** The first answer (a 2xx or a final problem) was stored with the effect. */
  'stored',
  /** A stored answer was given again. */
  'replayed',
  /** Another request under a used key: 422 idempotency_key_reuse. */
  'reused',
  /** The first request still runs: 409 request_in_progress. */
  'in_progress',
  /** A repeat of an answer that carried a one-time secret: 409 conflict. */
  'secret_repeat',
  /** An answer that is never stored (401, 428, 429, 5xx, ...): the key stays free. */
  'not_stored',
  /** The answer was ready but the commit failed: 500, nothing happened, nothing stored. */
  'commit_failed',
  /** The key header, a query string or a missing required key: 400. */
  'invalid_key',
] as const;

/** One of {@link OUTCOMES}. */
export type Outcome = (typeof OUTCOMES)[number];
