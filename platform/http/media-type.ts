/**
 * The parameters of a JSON body's Content-Type (RFC 9110 section 8.3.1):
 * JSON between systems is UTF-8 (RFC 8259 section 8.1), so a charset that
 * says otherwise is refused rather than the bytes read as UTF-8 anyway.
 */
import { problem, type AppError } from '../../kernel/errs/index.js';

// RFC 9110 section 5.6.2 (token) and 5.6.4 (quoted-string, with obs-text).
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
const QUOTED =
  '"(?:[\\t \\x21\\x23-\\x5B\\x5D-\\x7E\\x80-\\xFF]|\\\\[\\t \\x21-\\x7E\\x80-\\xFF])*"';
// parameters = *( OWS ";" OWS [ parameter ] ), RFC 9110 section 5.6.6.
const PARAMETER = new RegExp(`[ \\t]*;[ \\t]*(?:(${TOKEN})=(${TOKEN}|${QUOTED}))?`, 'y');
const TRAILING_SPACE = /[ \t]*$/y;

function refuse(code: 'invalid_parameters' | 'unsupported_charset'): AppError {
  return problem(
    'unsupported_media_type',
    code === 'unsupported_charset'
      ? 'This server reads JSON bodies as UTF-8 only.'
      : 'The Content-Type parameters are not readable.',
    {
      errors: [{ pointer: '#header/Content-Type', code }],
      hint: 'Send Content-Type: application/json (a charset, if any, utf-8).',
    },
  );
}

function unquote(value: string): string {
  return value.startsWith('"') ? value.slice(1, -1).replace(/\\(.)/g, '$1') : value;
}

/**
 * Checks the parameters of a Content-Type whose media type already matched
 * `application/json`. Each `charset` parameter (the name and the value
 * case-insensitive, the value a token or a quoted-string) must say
 * `utf-8`; other parameters are ignored, since application/json defines
 * none. A parameter list outside the grammar is refused too: another
 * reader (a proxy, Fastify's own parser, which skips what it cannot read)
 * could find a charset in it that this one does not.
 *
 * @param contentType the request's Content-Type value.
 * @returns undefined when the body may be read as UTF-8 JSON, else a
 *   `415 unsupported_media_type` whose error names `#header/Content-Type`
 *   with code `unsupported_charset` or `invalid_parameters`.
 * @example
 * contentTypeRefusal('application/json; charset="UTF-8"'); // undefined
 * contentTypeRefusal('application/json; charset=utf-16')?.status; // 415
 */
export function contentTypeRefusal(contentType: string): AppError | undefined {
  const start = contentType.indexOf(';');
  if (start === -1) return undefined;
  const parameters = contentType.slice(start);
  let at = 0;
  for (;;) {
    TRAILING_SPACE.lastIndex = at;
    if (TRAILING_SPACE.test(parameters)) return undefined;
    PARAMETER.lastIndex = at;
    const match = PARAMETER.exec(parameters);
    if (match === null) return refuse('invalid_parameters');
    // A match always holds its ";", so the loop always moves on.
    at = PARAMETER.lastIndex;
    const [, name, value] = match;
    if (name === undefined || value === undefined) {
      // An empty parameter (";;") is in the grammar and says nothing; a
      // name without a value, or a value without a name, is not.
      if (at < parameters.length && parameters[at] !== ';') return refuse('invalid_parameters');
    } else if (name.toLowerCase() === 'charset' && unquote(value).toLowerCase() !== 'utf-8') {
      return refuse('unsupported_charset');
    }
  }
}
