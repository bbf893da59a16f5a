/**
 * JSON for the whole server: the strict parse that request bodies go through
 * (depth, prototype poisoning, duplicate members, what jsonb cannot hold),
 * JSON pointers, and canonical JSON (RFC 8785) with real duplicate-member
 * detection, which the idempotency plugin defines (it is self-contained) and
 * this module re-exports.
 */
import sjson from 'secure-json-parse';
import { findDuplicateMember, type JsonPath } from '../http/idempotency/canonical.js';

export {
  canonicalBody,
  canonicalJson,
  findDuplicateMember,
  hasDuplicateMembers,
  type CanonicalBody,
  type JsonPath,
} from '../http/idempotency/canonical.js';

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
 * named twice in one object is refused (with its path), and so are strings PostgreSQL's jsonb cannot store (U+0000, lone surrogates),
 * so such a body is a 400 at parse time rather than a 500 at write time.
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
  const duplicate = findDuplicateMember(text);
  if (duplicate !== undefined) return { ok: false, reason: 'duplicate_member', path: duplicate };
  const bad = findBadString(value);
  return bad === undefined ? { ok: true, value } : { ok: false, reason: bad };
}
