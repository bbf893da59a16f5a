import { problem, type AppError } from './app-error.js';

/**
 * Counts the code points of a text: the unit of PostgreSQL's char_length
 * and of JSON Schema's maxLength, so a length checked in a use case agrees
 * with the column's and the HTTP schema's.
 *
 * @param value the text.
 * @returns how many code points it holds (a surrogate pair is one).
 */
export function codePoints(value: string): number {
  let count = 0;
  for (const _ of value) count += 1;
  return count;
}

/**
 * A `validation_failed` problem about one field, its detail given both as
 * the problem's and as the field's, as the HTTP schema's refusals read.
 *
 * @param pointer where the field is, as a JSON pointer into the request (`#body/name`).
 * @param code the field's error code (`min_length`, `max_length`, ...).
 * @param detail the sentence for a person.
 * @returns the problem, to throw.
 */
export function invalidField(pointer: string, code: string, detail: string): AppError {
  return problem('validation_failed', detail, { errors: [{ pointer, code, detail }] });
}
