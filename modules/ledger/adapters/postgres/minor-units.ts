/**
 * Reading bigint amounts: postgres.js hands bigint columns over as text
 * (platform/pg keeps its default), and the ledger's numbers are safe integers.
 */

/**
 * Turns a bigint column's text into a number of minor units.
 *
 * @param text the column value, as `balance::text` gives it.
 * @returns the number.
 * @throws RangeError when the value is not a non-negative safe integer, which
 *   the table's checks rule out: reaching it means the schema and the code
 *   disagree, and no rounded amount may go out.
 */
export function toMinorUnits(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value)) {
    throw new RangeError(`ledger amount ${JSON.stringify(text)} is not a safe integer`);
  }
  return value;
}
