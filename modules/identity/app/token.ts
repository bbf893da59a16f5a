/**
 * The API token format: `tok_<8 base32 characters>.<43 base64url characters>`.
 *
 * The part before the dot is a public prefix (40 random bits) that owners see
 * in listings to tell their tokens apart; the part after it is the secret, 32
 * bytes (256 bits) from the operating system's CSPRNG. Only the SHA-256 of
 * the whole token is stored: a plain hash suffices because the secret is
 * uniformly random and far too long to guess, so there is nothing for a slow
 * password hash to protect, and a fast one keeps authentication cheap.
 */
import { createHash, randomBytes } from 'node:crypto';

/** The literal that opens every token, so a leaked one is recognisable by scanners. */
const TAG = 'tok_';
/** RFC 4648 base32 in lower case: no characters that look alike in URLs or logs. */
const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const PREFIX_RANDOM_BYTES = 5;
const SECRET_BYTES = 32;
/** `tok_` + 8 + `.` + 43: every well-formed token has exactly this length. */
const TOKEN_LENGTH = TAG.length + 8 + 1 + 43;
const SHAPE = /^tok_[a-z2-7]{8}\.[A-Za-z0-9_-]{43}$/;

/** The token format in words, for documentation and error hints. */
export const TOKEN_PATTERN_DESCRIPTION =
  'tok_ followed by 8 lower-case base32 characters, a dot, and 43 base64url characters';

/** A newly made token: the only moment its secret exists in the clear. */
export interface GeneratedToken {
  /** The whole token, to be shown to its owner once and never stored. */
  readonly token: string;
  /** The public prefix (`tok_` and 8 base32 characters). */
  readonly prefix: string;
  /** SHA-256 of the whole token: what the database keeps. */
  readonly sha256: Buffer;
}

/** What a well-formed token reveals without a database: its prefix and its hash. */
export interface ParsedToken {
  /** The public prefix. */
  readonly prefix: string;
  /** SHA-256 of the whole token, the key to look it up by. */
  readonly sha256: Buffer;
}

function base32(bytes: Buffer): string {
  let out = '';
  let bits = 0;
  let value = 0;
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += BASE32.charAt((value >>> bits) & 31);
    }
  }
  return out;
}

function sha256(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/**
 * Makes a new token from fresh random bytes.
 *
 * @returns the token, its prefix and the SHA-256 to store.
 */
export function generateToken(): GeneratedToken {
  const prefix = TAG + base32(randomBytes(PREFIX_RANDOM_BYTES));
  const token = `${prefix}.${randomBytes(SECRET_BYTES).toString('base64url')}`;
  return { token, prefix, sha256: sha256(token) };
}

/**
 * Checks a presented token's shape strictly and hashes it.
 *
 * Anything but the exact format is refused, including surrounding whitespace
 * and a secret whose last character carries non-zero spare bits. Such values
 * could never match a stored hash (it covers the exact characters), but
 * refusing them before any lookup keeps the rule plain: one token, one
 * spelling, and no database work for garbage.
 *
 * @param token the credential as presented (after `Bearer `); any value is
 *   accepted, so callers need not check its type first.
 * @returns the prefix and hash, or null when the value is not a well-formed
 *   token (callers treat that exactly like an unknown token).
 */
export function parseToken(token: unknown): ParsedToken | null {
  if (typeof token !== 'string' || token.length !== TOKEN_LENGTH || !SHAPE.test(token)) {
    return null;
  }
  const secret = token.slice(TAG.length + 9);
  if (Buffer.from(secret, 'base64url').toString('base64url') !== secret) return null;
  return { prefix: token.slice(0, TAG.length + 8), sha256: sha256(token) };
}
