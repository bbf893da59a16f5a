/**
 * Idempotency keys: UUIDv7 (RFC 9562) in lower case, made here or given by
 * a caller and checked; a key's first 48 bits are the time it was made.
 */
// A built-in through process.getBuiltinModule, not an ES import: the import
// reads every export of the module, lazy ones included, which costs the
// command line's start-up (docs/DECISIONS.md, "The client sends with
// node:http").
const { randomBytes } = process.getBuiltinModule('node:crypto');

/** A lower-case UUIDv7 in canonical 8-4-4-4-12 form. */
export const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/**
 * Makes a new key: a UUIDv7 (RFC 9562), 48 bits of milliseconds then random
 * bits, in lower case.
 *
 * @param clock the time source in milliseconds since the epoch; default `Date.now`.
 * @returns the key.
 */
export function newKey(clock: () => number = Date.now): string {
  const b = randomBytes(16);
  let ms = clock();
  for (let i = 5; i >= 0; i -= 1) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = ((b[6] ?? 0) & 0x0f) | 0x70;
  b[8] = ((b[8] ?? 0) & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * The time a UUIDv7 key was made: its first 48 bits, milliseconds since
 * the epoch.
 *
 * @param key a UUIDv7 in canonical form.
 * @returns its time in milliseconds since the epoch.
 */
export function keyTime(key: string): number {
  return Number.parseInt(key.replace(/-/g, '').slice(0, 12), 16);
}

/**
 * Checks a key given by a caller.
 *
 * @param key the key.
 * @returns it in lower case.
 * @throws RangeError when it is not a UUIDv7 in canonical form.
 */
export function checkKey(key: string): string {
  const lower = key.toLowerCase();
  if (!UUID_V7.test(lower)) {
    throw new RangeError(`the key must be a UUIDv7 in canonical form, got "${key}"`);
  }
  return lower;
}
