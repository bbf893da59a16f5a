/**
 * JSON for the whole server: the strict parse that request bodies go through
 * (depth, prototype poisoning, duplicate members, what jsonb cannot hold),
 * JSON pointers, and canonical JSON (RFC 8785) with real duplicate-member
 * detection, which the idempotency plugin defines (it is self-contained) and
 * this module re-exports.
 */
import { getLocation } from 'jsonc-parser';
import sjson from 'secure-json-parse';
import { findDuplicateMember, type JsonPath } from '../http/idempotency/index.js';

export {
  canonicalBody,
  canonicalJson,
  findDuplicateMember,
  hasDuplicateMembers,
  type CanonicalBody,
  type JsonPath,
} from '../http/idempotency/index.js';

/**
 * A JSON pointer (RFC 6901) for a path: `~` written `~0`, `/` written `~1`.
 *
 * @param path member names and array indices.
 * @returns the pointer, `''` for the whole value.
 * @example jsonPointer(['a', 1, 'b/c']) // '/a/1/b~1c'
 */
export function jsonPointer(path: JsonPath): string {
  return path.map((p) => `/${String(p).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

/** Outcome of {@link parseJsonStrict}. */
export type StrictParse =
  | { readonly ok: true; readonly value: unknown }
  | {
      readonly ok: false;
      readonly reason:
        'invalid_json' | 'lone_surrogate' | 'nul_character' | 'prototype_poisoning' | 'too_deep';
    }
  | {
      readonly ok: false;
      readonly reason: 'duplicate_member';
      /** The member named a second time. */
      readonly path: JsonPath;
    }
  | {
      readonly ok: false;
      readonly reason: 'inexact_number';
      /** The first number that a double reads as another whole number. */
      readonly path: JsonPath;
    };

/**
 * The deepest nesting of arrays and objects a request body may have. Deeper
 * bodies are refused before parsing: recursive code downstream (validation,
 * cloning, serialization) would otherwise overflow the stack on a few
 * kilobytes of brackets.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Whether a JSON text nests arrays and objects deeper than a limit. A linear
 * scan that skips strings (and escapes inside them); it does not validate.
 *
 * @param text the JSON text.
 * @param limit the deepest nesting allowed.
 * @returns true when some value is nested deeper.
 */
export function nestedDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}

// Up to 15 digits (and a sign): below 2^53, so a double holds it exactly.
const SHORT_INTEGER = /^-?\d{1,15}$/;
const NUMBER = /^-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/**
 * Whether a JSON number, as written, is other than the whole number a double
 * reads it as: `0.99999999999999999` and `1.0000000000000001` read as 1,
 * `1e-400` as 0, `9007199254740993` as 9007199254740992. A schema that asks
 * for an integer sees only the double, so it would take these as the whole
 * number; for an amount of money that is a rounding nobody asked for.
 * Numbers a double reads as a fraction are left to the schema, and whole
 * numbers written with a zero fraction or an exponent (`150.0`, `1.5e2`) are
 * exact.
 *
 * @param token the number's text, as JSON writes it (a valid JSON number).
 * @returns true when the double is a whole number and the text is not that number.
 * @example readsAsAnotherInteger('0.99999999999999999') // true
 * @example readsAsAnotherInteger('1.5e2') // false
 */
export function readsAsAnotherInteger(token: string): boolean {
  if (SHORT_INTEGER.test(token)) return false;
  const value = Number(token);
  // A fraction stays a fraction (an integer schema refuses it); so does an
  // overflow to Infinity.
  if (!Number.isInteger(value)) return false;
  const parts = NUMBER.exec(token);
  if (parts === null) return false;
  const fraction = parts[2] ?? '';
  let digits = `${parts[1] ?? ''}${fraction}`.replace(/^0+/, '');
  // Zero is exact, however it is written.
  if (digits === '') return false;
  let exponent = Number(parts[3] ?? '0') - fraction.length;
  // A loop, not /0+$/: the regular expression tries each position of a run
  // of zeros and takes time in its square (a 320 KB number held the event
  // loop 97 s; a body up to http.body_limit reaches this before any
  // authentication).
  let end = digits.length;
  while (end > 0 && digits.charCodeAt(end - 1) === 48) end -= 1;
  exponent += digits.length - end;
  digits = digits.slice(0, end);
  // A fraction as written, a whole number as read.
  if (exponent < 0) return true;
  // Whole as written: the double is finite, so the exponent is at most
  // about 308 and the power is cheap.
  return BigInt(digits) * 10n ** BigInt(exponent) !== BigInt(Math.abs(value));
}

/**
 * The path of the first number in a JSON text that a double reads as
 * another whole number (see {@link readsAsAnotherInteger}). A linear scan
 * that skips strings; the text must be valid JSON.
 *
 * @param text the JSON text.
 * @returns the path of that number (`[]` for a bare number), or undefined.
 */
export function findInexactInteger(text: string): JsonPath | undefined {
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      continue;
    }
    // Outside strings, valid JSON starts a number only with - or a digit.
    if (c !== 0x2d && (c < 0x30 || c > 0x39)) continue;
    let end = i + 1;
    while (end < text.length && isNumberCharacter(text.charCodeAt(end))) end++;
    if (readsAsAnotherInteger(text.slice(i, end))) return getLocation(text, i).path;
    i = end - 1;
  }
  return undefined;
}

function isNumberCharacter(c: number): boolean {
  // digits, '.', 'e', 'E', '+', '-'
  return (
    (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d
  );
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function badString(s: string): 'lone_surrogate' | 'nul_character' | undefined {
  if (s.includes('\u0000')) return 'nul_character';
  if (LONE_SURROGATE.test(s)) return 'lone_surrogate';
  return undefined;
}

function findBadString(value: unknown): 'lone_surrogate' | 'nul_character' | undefined {
  // Iterative walk: a deeply nested body must not overflow the stack.
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const v = pending.pop();
    if (typeof v === 'string') {
      const bad = badString(v);
      if (bad) return bad;
    } else if (Array.isArray(v)) {
      for (const item of v) pending.push(item);
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, item] of Object.entries(v)) {
        const bad = badString(k);
        if (bad) return bad;
        pending.push(item);
      }
    }
  }
  return undefined;
}

/**
 * Parses a request body as JSON the way every route of this server does:
 * bodies nested deeper than {@link MAX_JSON_DEPTH} are refused, prototype
 * poisoning (`__proto__`, `constructor.prototype`) is refused, a member
 * named twice in one object is refused (with its path), a number a double
 * would read as another whole number is refused (with its path, see
 * {@link readsAsAnotherInteger}), and so are strings PostgreSQL's jsonb
 * cannot store (U+0000, lone surrogates), so such a body is a 400 at parse
 * time rather than a 500 at write time or a rounded amount.
 *
 * @param text the body as text.
 * @returns the value, or why it was refused.
 */
export function parseJsonStrict(text: string): StrictParse {
  // secure-json-parse would skip a byte order mark, but the fingerprint
  // (canonicalBody) would not: RFC 8259 section 8.1 lets a parser refuse it.
  if (text.charCodeAt(0) === 0xfeff) return { ok: false, reason: 'invalid_json' };
  if (nestedDeeperThan(text, MAX_JSON_DEPTH)) return { ok: false, reason: 'too_deep' };
  let value: unknown;
  try {
    value = sjson.parse(text, null, { protoAction: 'error', constructorAction: 'error' });
  } catch {
    // secure-json-parse reports both kinds as SyntaxError: tell them apart.
    try {
      JSON.parse(text);
    } catch {
      return { ok: false, reason: 'invalid_json' };
    }
    return { ok: false, reason: 'prototype_poisoning' };
  }
  // JSON.parse kept the last of two equal names; another parser (a proxy, an
  // auditor, a client library) may keep the first. A body that means two
  // things is refused (RFC 7493, I-JSON).
  const duplicate = findDuplicateMember(text, { value });
  if (duplicate !== undefined) return { ok: false, reason: 'duplicate_member', path: duplicate };
  // Every number this API takes is a whole number (amounts in minor units):
  // one a double would round into a whole number is refused on its text.
  const inexact = findInexactInteger(text);
  if (inexact !== undefined) return { ok: false, reason: 'inexact_number', path: inexact };
  const bad = findBadString(value);
  return bad === undefined ? { ok: true, value } : { ok: false, reason: bad };
}
