/**
 * Reading the `Idempotency-Key` header: a UUIDv7 in canonical form (either
 * case), bare or as an RFC 8941 string in double quotes (the form of the IETF
 * Idempotency-Key draft). Both forms name the same key.
 */
import { isUuidV7, type Id } from '../../../kernel/ids/index.js';

/** The header's name as documented. */
export const KEY_HEADER = 'Idempotency-Key';

/** What the request carries. */
export type KeyHeader =
  | { readonly kind: 'absent' }
  | { readonly kind: 'invalid' }
  | { readonly kind: 'valid'; readonly key: Id };

/**
 * Reads the key from the raw header list, so that two `Idempotency-Key`
 * headers (which Node.js would join with a comma) are told apart from one.
 *
 * @param rawHeaders Node.js's flat [name, value, name, value, ...] list.
 * @returns absent, invalid, or the key in lower case.
 */
export function readKeyHeader(rawHeaders: readonly string[]): KeyHeader {
  let value: string | undefined;
  let count = 0;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]?.toLowerCase() === 'idempotency-key') {
      count++;
      value = rawHeaders[i + 1];
    }
  }
  if (count === 0 || value === undefined) return { kind: 'absent' };
  if (count > 1) return { kind: 'invalid' };
  return parseKey(value.trim());
}

/**
 * Parses one header value.
 *
 * @param value the value without surrounding whitespace.
 * @returns invalid, or the key in lower case.
 */
export function parseKey(value: string): KeyHeader {
  const bare =
    value.length === 38 && value.startsWith('"') && value.endsWith('"')
      ? value.slice(1, -1)
      : value;
  if (!isUuidV7(bare)) return { kind: 'invalid' };
  return { kind: 'valid', key: bare.toLowerCase() as Id };
}

/**
 * Whether the raw header list names an `Idempotency-Key` at all (cheaper
 * than reading it: decides whether the body bytes are kept).
 *
 * @param rawHeaders Node.js's flat [name, value, name, value, ...] list.
 * @returns true when the header is present, valid or not.
 */
export function hasKeyHeader(rawHeaders: readonly string[]): boolean {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]?.toLowerCase() === 'idempotency-key') return true;
  }
  return false;
}
