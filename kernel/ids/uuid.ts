import { randomFillSync } from 'node:crypto';

/**
 * A UUIDv7 in canonical lower-case 8-4-4-4-12 form.
 *
 * The brand keeps arbitrary strings from being passed where a checked id is
 * expected: obtain one from {@link newId} or {@link parseId}, never by a cast.
 */
export type Id = string & { readonly __brand: 'Id' };

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
const UUID_ANY = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
const UUID_NIL = '00000000-0000-0000-0000-000000000000';
const UUID_MAX = 'ffffffff-ffff-ffff-ffff-ffffffffffff';

/** The largest unix millisecond the 48-bit timestamp field can hold. */
const MAX_TIMESTAMP = 2 ** 48 - 1;
const MAX_COUNTER = 0xfff;
/**
 * Seeds stay in the lower half of the 12-bit counter (RFC 9562 section 6.2,
 * guard bits), so at least 2048 ids fit in one millisecond before the stamp
 * has to borrow the next one.
 */
const SEED_MASK = 0x7ff;

/** How many characters of a refused value an error message may quote. */
const QUOTE_LIMIT = 64;

/**
 * Random bytes are drawn in blocks because one call to the CSPRNG per id
 * costs far more than the copy out of a block.
 */
const POOL_SIZE = 16 * 256;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let poolOffset = POOL_SIZE;

function takeRandom(size: number): number {
  if (poolOffset + size > POOL_SIZE) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const start = poolOffset;
  poolOffset += size;
  return start;
}

/**
 * Generator state. `lastRequestedMs` is the time the caller asked for last;
 * `lastMs` is the stamp actually written, which runs ahead of it only when
 * more ids than the counter can hold were made in one millisecond.
 */
let lastRequestedMs = -1;
let lastMs = -1;
let counter = 0;

function seedCounter(): number {
  const at = takeRandom(2);
  return pool.readUInt16BE(at) & SEED_MASK;
}

function nextStamp(ms: number): void {
  if (ms < lastRequestedMs || ms > lastMs) {
    // A new millisecond, or a clock that stepped back: the caller's time is
    // honoured exactly; order is promised only while time does not go back.
    lastMs = ms;
    counter = seedCounter();
  } else {
    counter += 1;
    if (counter > MAX_COUNTER) {
      // Borrowing the next millisecond keeps ids ordered (RFC 9562 section 6.2);
      // the stamp catches up as soon as the real time passes it.
      lastMs = Math.min(lastMs + 1, MAX_TIMESTAMP);
      counter = seedCounter();
    }
  }
  lastRequestedMs = ms;
}

const bytes = Buffer.alloc(16);

/**
 * Creates a new UUIDv7 (RFC 9562): a 48-bit unix millisecond timestamp, the
 * version 7, a 12-bit counter in rand_a and 62 random bits from node:crypto.
 *
 * Ids made in the same millisecond by this process sort in creation order: the
 * counter is seeded at random for each new millisecond and incremented for
 * every further id in it. When it is exhausted the stamp moves one millisecond
 * ahead of the given time rather than break the order. Order is not promised
 * across a clock that moves backwards; such an id carries the earlier time.
 *
 * @param now - the time to stamp; the current time when omitted (pass the
 *   kernel clock's `now()` so tests control it).
 * @returns the new id in canonical lower-case form.
 * @throws {TypeError} when `now` is an invalid Date.
 * @throws {RangeError} when `now` is before 1970 or beyond what 48 bits hold.
 * @example
 * const id = newId(clock.now());
 */
export function newId(now?: Date): Id {
  const ms = now === undefined ? Date.now() : now.getTime();
  if (Number.isNaN(ms)) {
    throw new TypeError('newId: invalid Date');
  }
  if (ms < 0 || ms > MAX_TIMESTAMP) {
    throw new RangeError(`newId: time ${ms} is outside the UUIDv7 timestamp range`);
  }
  nextStamp(ms);
  bytes.writeUIntBE(lastMs, 0, 6);
  bytes[6] = 0x70 | (counter >>> 8);
  bytes[7] = counter & 0xff;
  const at = takeRandom(8);
  // Variant 10 in the two top bits of byte 8, 62 random bits after it.
  bytes.writeUInt8(0x80 | (pool.readUInt8(at) & 0x3f), 8);
  pool.copy(bytes, 9, at + 1, at + 8);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}` as Id;
}

/**
 * Tells whether a string is a UUIDv7 in canonical 8-4-4-4-12 hex form, in
 * either case: version nibble 7, variant 10 (first nibble of the fourth group
 * 8, 9, a or b). Braces, quotes, whitespace and the dash-less form are refused.
 *
 * @param s - the string to test.
 * @returns true when `s` is a UUIDv7.
 */
export function isUuidV7(s: string): boolean {
  return UUID_V7.test(s);
}

/**
 * Tells whether a string is any RFC 9562 uuid in canonical 8-4-4-4-12 hex
 * form, in either case: versions 1 to 8 with variant 10, plus the Nil and Max
 * uuids. Used where an id may come from elsewhere, such as a resource id.
 *
 * @param s - the string to test.
 * @returns true when `s` is a uuid.
 */
export function isUuid(s: string): boolean {
  if (UUID_ANY.test(s)) {
    return true;
  }
  // The length check spares lower-casing an arbitrarily long input.
  if (s.length !== 36) {
    return false;
  }
  const lower = s.toLowerCase();
  return lower === UUID_NIL || lower === UUID_MAX;
}

/** Quotes a refused value for a message without letting a huge input flood logs. */
function quote(s: string): string {
  if (s.length <= QUOTE_LIMIT) {
    return JSON.stringify(s);
  }
  return `${JSON.stringify(s.slice(0, QUOTE_LIMIT))}... (${s.length} characters)`;
}

/**
 * Checks that a string is a UUIDv7 and returns it as an {@link Id}.
 *
 * @param s - the candidate, in either case.
 * @returns the id in canonical lower-case form, so equal ids compare equal.
 * @throws {TypeError} naming the value (quoted, cut at 64 characters) when it
 *   is not a UUIDv7 in canonical form.
 */
export function parseId(s: string): Id {
  if (!UUID_V7.test(s)) {
    throw new TypeError(`not a UUIDv7: ${quote(s)}`);
  }
  return s.toLowerCase() as Id;
}

/**
 * Reads the creation time stamped in a UUIDv7.
 *
 * @param id - the id.
 * @returns the time of its 48-bit timestamp, to the millisecond.
 * @throws {TypeError} when the value is not a UUIDv7 (only possible after an
 *   unchecked cast to {@link Id}).
 */
export function idTimestamp(id: Id): Date {
  if (!UUID_V7.test(id)) {
    throw new TypeError(`not a UUIDv7: ${quote(id)}`);
  }
  return new Date(Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16));
}
