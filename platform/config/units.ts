// Parsing and formatting of the textual forms configuration values take:
// durations, sizes and integers given as environment strings.

/** A unit table: unit names with their factor, largest first so formatting finds the coarsest exact unit. */
type UnitTable = readonly (readonly [unit: string, factor: number])[];

/** Milliseconds per duration unit. */
const DURATION_UNITS: UnitTable = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1_000],
  ['ms', 1],
];

/** Bytes per size unit: binary multiples, as body limits are usually meant. */
const SIZE_UNITS: UnitTable = [
  ['gb', 1_073_741_824],
  ['mb', 1_048_576],
  ['kb', 1_024],
  ['b', 1],
];

/** JSON Schema pattern of a duration string: `<integer><unit>`. */
export const DURATION_PATTERN = '^[0-9]+(ms|s|m|h|d)$';

/** JSON Schema pattern of a size string: `<integer><unit>`. */
export const SIZE_PATTERN = '^[0-9]+(b|kb|mb|gb)$';

const DIGITS_RE = /^[0-9]+$/;
const INTEGER_RE = /^-?[0-9]+$/;

/**
 * Reads `<digits><unit>` against a unit table. Units that are suffixes of
 * others ("s" of "ms", "b" of "kb") are harmless: the digits check fails for
 * the wrong split and the loop moves on to the right one.
 */
function parseAmount(text: string, table: UnitTable): number | undefined {
  for (const [unit, factor] of table) {
    const digits = text.slice(0, text.length - unit.length);
    if (text.endsWith(unit) && DIGITS_RE.test(digits)) {
      const result = Number(digits) * factor;
      // Past 2^53 - 1 doubles stop counting exactly and two inputs could compare equal.
      return Number.isSafeInteger(result) ? result : undefined;
    }
  }
  return undefined;
}

/**
 * Converts a duration string such as `"500ms"`, `"5s"` or `"24h"` to milliseconds.
 *
 * @param text - an integer immediately followed by one of the units ms, s, m, h, d
 * @returns the duration in milliseconds, or undefined when the text is not a
 *   duration or its value is too large to be represented exactly
 */
export function parseDuration(text: string): number | undefined {
  return parseAmount(text, DURATION_UNITS);
}

/**
 * Converts a size string such as `"100b"`, `"512kb"` or `"1mb"` to bytes
 * (1kb = 1024 bytes).
 *
 * @param text - an integer immediately followed by one of the units b, kb, mb, gb
 * @returns the size in bytes, or undefined when the text is not a size or its
 *   value is too large to be represented exactly
 */
export function parseSize(text: string): number | undefined {
  return parseAmount(text, SIZE_UNITS);
}

/**
 * Parses an integer written in decimal digits with an optional leading minus
 * sign, refusing everything `Number()` or `parseInt()` would quietly accept
 * or truncate (`""`, `"1.5"`, `"12x"`, `" 1"`, `"1e3"`, `"0x10"`).
 *
 * @param text - the text to parse, typically an environment variable's value
 * @returns the integer, or undefined when the text is not exactly an integer
 *   in the safe range
 */
export function parseStrictInteger(text: string): number | undefined {
  if (!INTEGER_RE.test(text)) return undefined;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : undefined;
}

const DECIMAL_RE = /^(0|[1-9][0-9]*)(\.[0-9]+)?$/;

/**
 * Parses a non-negative decimal number written in digits with an optional
 * fraction (`0`, `1`, `0.25`), refusing what `Number()` would quietly
 * accept (`""`, `" 1"`, `"1e-1"`, `".5"`, `"0x1"`, `"Infinity"`).
 *
 * @param text - the text to parse, typically an environment variable's value
 * @returns the number, or undefined when the text is not exactly such a decimal
 */
export function parseStrictDecimal(text: string): number | undefined {
  return DECIMAL_RE.test(text) ? Number(text) : undefined;
}

/** Writes an amount in the coarsest unit that represents it exactly; zero takes the base unit. */
function format(amount: number, table: UnitTable, base: string, what: string): string {
  if (!Number.isSafeInteger(amount) || amount < 0) {
    throw new RangeError(`cannot format ${String(amount)} as a ${what}`);
  }
  const found = table.find(([, factor]) => amount >= factor && amount % factor === 0);
  return found === undefined ? `0${base}` : `${amount / found[1]}${found[0]}`;
}

/**
 * Writes milliseconds as a duration string in the coarsest exact unit, so
 * that 60000 becomes `"1m"` and 1500 stays `"1500ms"`.
 *
 * @param ms - a whole, non-negative number of milliseconds
 * @returns a string that parseDuration turns back into `ms`
 * @throws RangeError when `ms` is negative, fractional or not a safe integer
 */
export function formatDuration(ms: number): string {
  return format(ms, DURATION_UNITS, 'ms', 'duration');
}

/**
 * Writes bytes as a size string in the coarsest exact unit, so that 1048576
 * becomes `"1mb"` and 1536 stays `"1536b"`.
 *
 * @param bytes - a whole, non-negative number of bytes
 * @returns a string that parseSize turns back into `bytes`
 * @throws RangeError when `bytes` is negative, fractional or not a safe integer
 */
export function formatSize(bytes: number): string {
  return format(bytes, SIZE_UNITS, 'b', 'size');
}

/**
 * Like parseDuration, for callers that have validated the text already and
 * treat a failure as a programming error rather than bad input.
 *
 * @param text - a duration string
 * @returns the duration in milliseconds
 * @throws RangeError naming the text when it is not a valid duration
 */
export function requireDuration(text: string): number {
  const ms = parseDuration(text);
  if (ms === undefined) throw new RangeError(`not a duration: ${JSON.stringify(text)}`);
  return ms;
}

/**
 * Like parseSize, for callers that have validated the text already and
 * treat a failure as a programming error rather than bad input.
 *
 * @param text - a size string
 * @returns the size in bytes
 * @throws RangeError naming the text when it is not a valid size
 */
export function requireSize(text: string): number {
  const bytes = parseSize(text);
  if (bytes === undefined) throw new RangeError(`not a size: ${JSON.stringify(text)}`);
  return bytes;
}
