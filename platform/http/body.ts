/**
 * The JSON body parser of every route: refuses invalid UTF-8, prototype
 * poisoning, and strings PostgreSQL's jsonb cannot store (U+0000, lone
 * surrogates), each as `400 validation_failed` with pointer `#body`, and a
 * member named twice in one object (pointer at that member, code
 * `duplicate_member`), and a number a double would read as another whole
 * number (pointer at it, code `inexact_number`: `0.99999999999999999` is
 * not 1). A body with a Content-Encoding other than identity is
 * `415 unsupported_media_type`: nothing here decodes it; so is a
 * Content-Type whose charset is not UTF-8 or whose parameters do not parse
 * (media-type.ts).
 */
import type { FastifyRequest } from 'fastify';
import { problem } from '../../kernel/errs/index.js';
import { contentTypeRefusal } from './media-type.js';
import { jsonPointer, MAX_JSON_DEPTH, parseJsonStrict } from '../jsoncanon/index.js';

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const DETAIL: Readonly<Record<string, string>> = {
  duplicate_member: 'The body names a member twice in one object.',
  inexact_number:
    'The body holds a number that only rounding makes a whole number: send whole numbers exactly.',
  invalid_json: 'The body is not valid JSON.',
  invalid_utf8: 'The body is not valid UTF-8.',
  lone_surrogate: 'The body holds a lone UTF-16 surrogate, which cannot be stored.',
  nul_character: 'The body holds the character U+0000, which cannot be stored.',
  prototype_poisoning:
    'The body holds a forbidden member name (__proto__ or constructor.prototype).',
  too_deep: `The body nests arrays and objects deeper than ${String(MAX_JSON_DEPTH)} levels.`,
};

function refuse(code: string, pointer = '#body'): Error {
  return problem('validation_failed', DETAIL[code] ?? 'The body is not valid.', {
    errors: [{ pointer, code }],
  });
}

/**
 * Fastify content type parser for `application/json` (registered with
 * `parseAs: 'buffer'`). An empty body parses as no body.
 *
 * @param req the request (its Content-Encoding: none, or identity).
 * @param body the bytes read (within the route's body limit).
 * @param done Fastify's callback.
 */
export function jsonBodyParser(
  req: FastifyRequest,
  body: string | Buffer,
  done: (err: Error | null, value?: unknown) => void,
): void {
  const encoding = req.headers['content-encoding'];
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
    // The bytes would be parsed as they are, so a compressed body would be
    // read as something else than what the client (or a proxy) meant.
    done(
      problem('unsupported_media_type', 'This server does not decode a Content-Encoding.', {
        hint: 'Send the JSON body uncompressed, without Content-Encoding.',
      }),
    );
    return;
  }
  // The media type matched application/json; its parameters are checked
  // here, where the bytes are about to be read as UTF-8.
  const charset = contentTypeRefusal(req.headers['content-type'] ?? '');
  if (charset !== undefined) {
    done(charset);
    return;
  }
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  if (bytes.length === 0) {
    done(null, undefined);
    return;
  }
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    done(refuse('invalid_utf8'));
    return;
  }
  const parsed = parseJsonStrict(text);
  if (parsed.ok) done(null, parsed.value);
  else if (parsed.reason === 'duplicate_member' || parsed.reason === 'inexact_number')
    done(refuse(parsed.reason, `#body${jsonPointer(parsed.path)}`));
  else done(refuse(parsed.reason));
}
