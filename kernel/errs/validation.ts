/**
 * Fastify's validation error (Ajv or TypeBox items on `error.validation`) as
 * a `400 validation_failed` problem with one JSON pointer per finding. One
 * function, used by the server's error mapping and by the idempotency
 * plugin's default one, so a keyed and an unkeyed request that fail the
 * same validation carry the same problem.
 */
import { problem, type AppError, type ProblemFieldError } from './app-error.js';

/** The subset of Fastify's validation error item read here. */
export interface ValidationItem {
  readonly instancePath?: string;
  readonly keyword?: string;
  readonly message?: string;
  readonly params?: Record<string, unknown>;
}

/** Where Fastify's validation error happened, mapped to our pointer roots. */
const CONTEXT_ROOT: Readonly<Record<string, string>> = {
  body: '#body',
  querystring: '#query',
  params: '#path',
  headers: '#header',
};

/**
 * How many entries the `errors` list of a validation problem holds at most;
 * the detail counts the rest. Documented in docs/api/README.md.
 */
export const MAX_LISTED_FIELD_ERRORS = 100;

/**
 * How many findings a TypeBox-compiled validator collects before it stops
 * looking. TypeBox's default is 8, too few to name what is wrong with a
 * body of a few unknown members and a wrong value. High enough for any
 * honest request, bounded so a body of thousands of wrong members costs no
 * more than a few milliseconds; the answer lists at most
 * {@link MAX_LISTED_FIELD_ERRORS} of them, and a list that reached this many
 * is counted as "at least", since the validator stopped looking there.
 */
export const VALIDATION_SCAN_LIMIT = 1000;

const snake = (s: string): string => s.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();

/**
 * Turns Fastify/Ajv validation items into field errors with JSON pointers
 * prefixed by the part of the request (`#body/amount`, `#query`, ...).
 *
 * @param context Fastify's `validationContext` (`body` when absent or unknown).
 * @param items the validation items.
 * @returns one field error per item, or one `invalid` at the part's root
 *   when there is none.
 */
export function fieldErrors(
  context: string | undefined,
  items: readonly ValidationItem[],
): ProblemFieldError[] {
  const root = CONTEXT_ROOT[context ?? 'body'] ?? '#body';
  // A validator that fails without naming anything (one that filtered its
  // own findings away) still gets an entry: an empty list reads as "nothing
  // wrong", and a client that shows errors[] would show nothing.
  if (items.length === 0) return [{ pointer: root, code: 'invalid' }];
  return items.map((item) => {
    let path = item.instancePath ?? '';
    if (item.keyword === 'required' && typeof item.params?.['missingProperty'] === 'string') {
      path = `${path}/${item.params['missingProperty'].replace(/~/g, '~0').replace(/\//g, '~1')}`;
    }
    const code = item.keyword === undefined ? 'invalid' : snake(item.keyword);
    return item.message === undefined
      ? { pointer: `${root}${path}`, code }
      : { pointer: `${root}${path}`, code, detail: item.message };
  });
}

/**
 * The problem of a Fastify validation error.
 *
 * @param err anything thrown.
 * @returns `400 validation_failed` listing at most
 *   {@link MAX_LISTED_FIELD_ERRORS} findings and counting the rest in its
 *   detail, when `err` carries a `validation` array; otherwise undefined.
 */
export function validationProblem(err: unknown): AppError | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { validation?: unknown; validationContext?: unknown };
  if (!Array.isArray(e.validation)) return undefined;
  const context = typeof e.validationContext === 'string' ? e.validationContext : undefined;
  const items = e.validation as ValidationItem[];
  const listed = fieldErrors(context, items.slice(0, MAX_LISTED_FIELD_ERRORS));
  // A body can hold thousands of wrong members: the answer lists a bounded
  // number and counts the rest in the detail, so a 400 stays small.
  const count =
    items.length >= VALIDATION_SCAN_LIMIT
      ? `at least ${String(items.length)}`
      : String(items.length);
  const detail =
    items.length > MAX_LISTED_FIELD_ERRORS
      ? `The request is not valid: ${count} problems, the first ${String(MAX_LISTED_FIELD_ERRORS)} listed.`
      : 'The request is not valid.';
  return problem('validation_failed', detail, { errors: listed, cause: err });
}
