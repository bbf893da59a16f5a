/**
 * The plugin's additions to the API document, applied through
 * @fastify/swagger's `transform` (not through `schema.headers`, which would
 * make Fastify validate the key itself and answer with another error).
 */
import { FINAL_PROBLEMS } from './attempt.js';

/** Description of the header in the API document. */
const KEY_DESCRIPTION =
  'A UUIDv7, bare or as an RFC 8941 string in double quotes. The first request under a key runs; a repeat with ' +
  'the same request gets the stored answer with Idempotent-Replay: true (the first answer has false); another request under the same key gets ' +
  '422 idempotency_key_reuse; a repeat while the first still runs waits, then gets the answer or ' +
  '409 request_in_progress. Keys are per principal and expire. Ignored for anonymous callers.';

/**
 * The `Idempotency-Key-Lifetime` response header in the API document: on
 * every answer of a keyed request, and for a route that declares
 * `config.announceKeyLifetime` (which puts this in its own response
 * schema's `headers`).
 */
export const KEY_LIFETIME_DOC = Object.freeze({
  type: 'integer',
  minimum: 0,
  description:
    'How long the server keeps an Idempotency-Key, in whole seconds from its first request ' +
    '(sync.idempotency_key_ttl): a repeat under an older key runs as a new request. Sent on every ' +
    'answer of a request with a key, and on the routes that announce it, so a client can learn it before its first write.',
});

/**
 * The extension of the `Idempotency-Key` header's schema that lists the
 * error statuses a key stores and replays (every 2xx is stored too, and a
 * `409 request_in_progress` never is): the one list the server applies
 * (attempt.ts) and a client reads from the API document, so the two cannot
 * drift apart.
 */
export const STORED_ERRORS_EXTENSION = 'x-stored-error-statuses';

type Schema = Record<string, unknown>;
const isObject = (v: unknown): v is Schema =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Adds the `Idempotency-Key` header parameter and the `Idempotent-Replay`
 * and `Idempotency-Key-Lifetime` response headers to a keyed route's
 * schema, for the document only.
 *
 * @param schema the route schema as @fastify/swagger passes it.
 * @param idempotent the route's `config.idempotent`.
 * @returns a new schema (the route's own is not modified).
 */
export function documentKeyedRoute(
  schema: Schema | undefined,
  idempotent: unknown,
): Schema | undefined {
  if (idempotent !== true && idempotent !== 'required') return schema;
  const base: Schema = { ...(schema ?? {}) };
  const headers = isObject(base['headers']) ? base['headers'] : { type: 'object', properties: {} };
  const properties = isObject(headers['properties']) ? headers['properties'] : {};
  const required = Array.isArray(headers['required']) ? (headers['required'] as string[]) : [];
  base['headers'] = {
    ...headers,
    type: 'object',
    properties: {
      ...properties,
      'Idempotency-Key': {
        type: 'string',
        format: 'uuid',
        description: KEY_DESCRIPTION,
        [STORED_ERRORS_EXTENSION]: [...FINAL_PROBLEMS].sort((a, b) => a - b),
      },
    },
    required: idempotent === 'required' ? [...required, 'Idempotency-Key'] : required,
  };
  const response = isObject(base['response']) ? base['response'] : { 200: { type: 'object' } };
  const documented: Schema = {};
  for (const [status, res] of Object.entries(response)) {
    const r: Schema = isObject(res) ? { ...res } : {};
    const resHeaders = isObject(r['headers']) ? r['headers'] : {};
    r['headers'] = {
      ...resHeaders,
      'Idempotent-Replay': {
        type: 'string',
        enum: ['true', 'false'],
        description:
          'The answer of the Idempotency-Key: false on the first answer, stored under the key with its effect; ' +
          'true on that stored answer given again. Absent on an answer that was not stored (in progress, ' +
          'key reuse, 401, 429, 5xx): such an answer does not say whether an earlier attempt took effect.',
      },
      'Idempotency-Key-Lifetime': KEY_LIFETIME_DOC,
    };
    documented[status] = r;
  }
  base['response'] = documented;
  return base;
}
