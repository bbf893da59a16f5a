/**
 * Canonical JSON (RFC 8785, JSON Canonicalization Scheme) behind a thin
 * wrapper over the `canonicalize` package, and real duplicate-member
 * detection (which `JSON.parse` cannot do: it keeps the last duplicate
 * silently). Used for the fingerprint (so member order, whitespace and
 * equivalent escapes do not change it) and for the bytes of every keyed
 * answer (so a replay is byte-identical to the first answer).
 *
 * Part of the idempotency plugin, which imports only kernel ports and npm
 * packages; platform/jsoncanon re-exports it for the rest of the server.
 */
import canonicalize from 'canonicalize';
import { visit } from 'jsonc-parser';

/**
 * The RFC 8785 serialization of a JSON value: members sorted by UTF-16 code
 * units, no insignificant whitespace, ECMAScript number formatting, minimal
 * string escapes.
 *
 * @param value a JSON value (objects, arrays, strings, finite numbers, booleans, null).
 * @returns the canonical text.
 * @throws Error for values JSON cannot represent (NaN, Infinity, lone
 *   surrogates, undefined at the top level).
 */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError('value has no JSON representation');
  return text;
}

/**
 * Whether any object in a JSON text names the same member twice, comparing
 * names after unescaping (`"a"` and `"\u0061"` are the same name).
 *
 * @param text a JSON text; comments and trailing commas count as invalid.
 * @param parsed the text's value as `JSON.parse` gave it, when the caller
 *   has it: the answer then costs one pass over the text instead of a
 *   tokenizer's (see {@link membersCollapsed}).
 * @returns true when a duplicate exists.
 */
export function hasDuplicateMembers(text: string, parsed?: { readonly value: unknown }): boolean {
  if (parsed !== undefined) return membersCollapsed(text, parsed.value);
  return findDuplicateMember(text) !== undefined;
}

/** A path into a JSON value: member names and array indices. */
export type JsonPath = readonly (string | number)[];

/** Colons outside strings: in valid JSON, exactly one per object member. */
function memberSeparators(text: string): number {
  let count = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x3a) count++;
  }
  return count;
}

/** Own members of every object in a parsed JSON value. */
function parsedMembers(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  let count = 0;
  if (Array.isArray(value)) {
    for (const item of value as unknown[]) count += parsedMembers(item);
    return count;
  }
  for (const key of Object.keys(value)) {
    count += 1 + parsedMembers((value as Record<string, unknown>)[key]);
  }
  return count;
}

/**
 * Whether `JSON.parse` collapsed two members of one object into one: it
 * keeps one property per distinct name (the last), so a text with a
 * duplicate has more members (one colon outside strings each) than its
 * value has own properties. Exact for any text `JSON.parse` accepted.
 *
 * @param text a JSON text `JSON.parse` accepted.
 * @param value what it returned for the text.
 * @returns true when some object of the text names a member twice.
 */
export function membersCollapsed(text: string, value: unknown): boolean {
  return memberSeparators(text) !== parsedMembers(value);
}

/**
 * The first member an object in a JSON text names twice, comparing names
 * after unescaping (`"a"` and `"\u0061"` are the same name).
 *
 * @param text a JSON text; comments and trailing commas count as invalid.
 * @param parsed the text's value as `JSON.parse` gave it, when the caller
 *   has it: a text without a duplicate (the common case) then costs one
 *   pass, and only a text with one is tokenized to name it.
 * @returns the path of the repeated member, or undefined when none repeats.
 */
export function findDuplicateMember(
  text: string,
  parsed?: { readonly value: unknown },
): JsonPath | undefined {
  if (parsed !== undefined && !membersCollapsed(text, parsed.value)) return undefined;
  const stack: Set<string>[] = [];
  let found: JsonPath | undefined;
  visit(
    text,
    {
      onObjectBegin: () => {
        stack.push(new Set());
      },
      onObjectEnd: () => {
        stack.pop();
      },
      onObjectProperty: (name, _offset, _length, _line, _column, pathSupplier) => {
        const names = stack[stack.length - 1];
        if (names === undefined || found !== undefined) return;
        if (names.has(name)) found = [...pathSupplier(), name];
        names.add(name);
      },
    },
    { disallowComments: true, allowTrailingComma: false },
  );
  return found;
}

/** The body part of the fingerprint, and how it was derived. */
export interface CanonicalBody {
  /**
   * `json`: the RFC 8785 form of a JSON body without duplicate members;
   * `raw`: the bytes as received (not JSON, duplicate members, or not
   * canonicalizable); `empty`: no body.
   */
  readonly kind: 'json' | 'raw' | 'empty';
  /** The bytes that enter the fingerprint. */
  readonly bytes: Buffer;
}

/**
 * Derives the body part of a request fingerprint from the bytes received.
 *
 * @param raw the body bytes, or undefined when there is none.
 * @returns the canonical bytes for JSON, else the raw bytes.
 */
export function canonicalBody(raw: Buffer | undefined): CanonicalBody {
  if (raw === undefined || raw.length === 0) return { kind: 'empty', bytes: Buffer.alloc(0) };
  const text = raw.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: 'raw', bytes: raw };
  }
  try {
    if (hasDuplicateMembers(text, { value })) return { kind: 'raw', bytes: raw };
    return { kind: 'json', bytes: Buffer.from(canonicalJson(value), 'utf8') };
  } catch {
    return { kind: 'raw', bytes: raw };
  }
}
