/**
 * The idempotency plugin's public face: the plugin, its options and events,
 * its errors, the OpenAPI addition for @fastify/swagger's `transform`, the
 * headers it writes, the route label its refusals use, and canonical JSON
 * (RFC 8785) with duplicate-member detection, which platform/jsoncanon
 * re-exports; and the kernel ports it is given (the store, the unit of
 * work) and the error type its `toProblem` option returns, so a package
 * user implements them without reaching into its files. See README.md.
 *
 * @packageDocumentation
 */
export { idempotencyPlugin, idempotencyPlugin as default } from './plugin.js';
export type { IdempotencyDecorator } from './plugin.js';
export { DEFAULTS, defaultToProblem } from './options.js';
export type { IdempotencyEvent, IdempotencyOptions } from './options.js';
export { OUTCOMES, type Outcome } from './outcome.js';
export { ATTRIBUTES, SPANS, TRACER_NAME } from './tracing.js';
export {
  FST_IDEMPOTENCY_AMBIENT_TRANSACTION,
  FST_IDEMPOTENCY_HANDLER_CONTRACT,
  FST_IDEMPOTENCY_INVALID_OPTION,
  FST_IDEMPOTENCY_ROUTE_NOT_GUARDED,
  FST_IDEMPOTENCY_ROUTE_REFUSED,
} from './errors.js';
export { documentKeyedRoute, KEY_LIFETIME_DOC } from './openapi.js';
export {
  JSON_CONTENT_TYPE,
  KEY_LIFETIME_HEADER,
  PROBLEM_CONTENT_TYPE,
  REPLAY_HEADER,
  keyLifetimeValue,
} from './answers.js';
export { routeLabel } from './checks.js';
export {
  canonicalBody,
  canonicalJson,
  findDuplicateMember,
  hasDuplicateMembers,
  type CanonicalBody,
  type JsonPath,
} from './canonical.js';
export type {
  IdempotencyEntry,
  IdempotencyRequest,
  IdempotencyStore,
  StoredResponse,
} from '../../../kernel/idempotency/index.js';
export { isRequestInProgress, RequestInProgressError } from '../../../kernel/idempotency/index.js';
export type { UnitOfWork, UnitOfWorkOptions } from '../../../kernel/txn/index.js';
export {
  isRetryable,
  markNonRetryable,
  TransactionEscapeError,
} from '../../../kernel/txn/index.js';
export { AppError, isAppError, problem } from '../../../kernel/errs/index.js';
export type { ProblemCode, ProblemExtras } from '../../../kernel/errs/index.js';
