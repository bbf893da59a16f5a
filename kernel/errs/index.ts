/**
 * Errors for the client: the problem catalogue, AppError, the RFC 9457
 * problem body, the problem of a Fastify validation error, and the
 * `error.type` a span records for a failure.
 *
 * @packageDocumentation
 */
export type { ProblemDefinition, ProblemCode, ProblemType } from './catalogue.js';
export { isProblemCode, problemCatalogue, problemType } from './catalogue.js';
export type { ProblemExtras, ProblemFieldError } from './app-error.js';
export { AppError, isAppError, problem } from './app-error.js';
export type { ProblemBody } from './problem-body.js';
export { toProblemBody } from './problem-body.js';
export { codePoints, invalidField } from './field.js';
export type { ValidationItem } from './validation.js';
export {
  fieldErrors,
  MAX_LISTED_FIELD_ERRORS,
  VALIDATION_SCAN_LIMIT,
  validationProblem,
} from './validation.js';
export { errorType, isSqlState } from './error-type.js';
