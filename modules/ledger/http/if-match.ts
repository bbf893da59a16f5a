/**
 * The `If-Match` request header (RFC 9110, section 13.1.1) read as account
 * versions. An account's ETag is its version as a strong entity tag
 * (`"3"`); comparison is strong, so a weak tag (`W/"3"`) never matches.
 */
import { problem } from '../../../kernel/errs/index.js';
import type { VersionPrecondition } from '../app/ledger-service.js';

/** Largest version an account can have (the column is a bigint; versions stay exact JavaScript integers). */
const MAX_VERSION = Number.MAX_SAFE_INTEGER;

/** One entity tag at the start of the rest of a list, and what follows it. */
const ENTITY_TAG = /^[ \t]*(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"[ \t]*(?:,|$)/;
/** An empty list element (RFC 9110, section 5.6.1 allows and ignores them). */
const EMPTY_ELEMENT = /^[ \t]*,/;

/**
 * The ETag of an account version.
 *
 * @param version the account's version.
 * @returns the version in double quotes, e.g. `"3"`.
 */
export function etagOf(version: number): string {
  return `"${String(version)}"`;
}

function malformed(): never {
  throw problem('validation_failed', 'If-Match is not a list of entity tags.', {
    errors: [{ pointer: '#header/If-Match', code: 'invalid_format' }],
    hint: 'Send the ETag of the account as it came, in double quotes, for example If-Match: "3".',
  });
}

/**
 * Reads `If-Match` into the versions it names.
 *
 * @param header the header's value as Node.js gives it (repeated headers
 *   joined with commas), or undefined when absent.
 * @returns `missing`, `any` for `*`, or the versions of its strong tags
 *   whose value is a version number (possibly none: then nothing matches).
 * @throws AppError `validation_failed` (pointer `#header/If-Match`) when the
 *   value is not `*` or a list of entity tags.
 * @example
 * readIfMatch('"3", W/"4"'); // { kind: 'versions', versions: [3] }
 */
export function readIfMatch(header: string | undefined): VersionPrecondition {
  if (header === undefined) return { kind: 'missing' };
  if (header.trim() === '*') return { kind: 'any' };
  const versions: number[] = [];
  let rest = header;
  let tags = 0;
  while (rest.trim() !== '') {
    const empty = EMPTY_ELEMENT.exec(rest);
    if (empty !== null) {
      rest = rest.slice(empty[0].length);
      continue;
    }
    const tag = ENTITY_TAG.exec(rest);
    if (tag === null) return malformed();
    tags += 1;
    rest = rest.slice(tag[0].length);
    const [, weak, opaque = ''] = tag;
    if (weak !== undefined || !/^[1-9]\d{0,15}$/.test(opaque)) continue;
    const version = Number(opaque);
    if (version <= MAX_VERSION) versions.push(version);
  }
  if (tags === 0) return malformed();
  return { kind: 'versions', versions };
}
