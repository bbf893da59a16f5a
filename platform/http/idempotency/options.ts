/**
 * The plugin's options: what a Fastify user passes to `app.register`, with
 * a default where one makes sense, normalised and validated once at
 * registration (an error names the option).
 */
import type { FastifyRequest } from 'fastify';
import {
  AppError,
  isAppError,
  problem,
  problemCatalogue,
  validationProblem,
  type ProblemCode,
} from '../../../kernel/errs/index.js';
import type { IdempotencyStore } from '../../../kernel/idempotency/index.js';
import type { UnitOfWork } from '../../../kernel/txn/index.js';
import { FST_IDEMPOTENCY_INVALID_OPTION } from './errors.js';
import type { Outcome } from './outcome.js';

/** What the plugin reports as it works; see {@link IdempotencyOptions.onEvent}. */
export type IdempotencyEvent =
  | {
      /** A keyed request ended: exactly one per keyed request. */
      readonly type: 'outcome';
      /** The route's `schema.operationId`. */
      readonly route: string;
      readonly outcome: Outcome;
      readonly request: FastifyRequest;
    }
  | {
      /**
       * A keyed request waited for its key: in memory behind a duplicate of
       * this process, or in the store behind one of another process.
       */
      readonly type: 'key_wait';
      readonly route: string;
      readonly seconds: number;
    }
  | {
      /** How many keyed requests wait in memory right now (a gauge). */
      readonly type: 'local_waiters';
      readonly count: number;
    };

/** Options of the plugin, as a Fastify user writes them. */
export interface IdempotencyOptions {
  /** Where keys and answers live (required): e.g. module sync's PostgreSQL store. */
  readonly store: IdempotencyStore;
  /** The unit of work the route handlers' writes join (required): key row and effect commit in it. */
  readonly transaction: UnitOfWork;
  /**
   * The owner of a request's keys (required): a principal id, or null (or
   * undefined) when the caller is anonymous, in which case the header has no
   * effect. Called in the route's `preValidation` hook, so whatever
   * identifies the caller must have run by then (an `onRequest` hook, or an
   * app-level `preParsing` or `preValidation` one), not in `preHandler`.
   */
  readonly scope: (request: FastifyRequest) => string | null | undefined;
  /** How long a key lives, in milliseconds. Default 24 hours. */
  readonly ttl?: number;
  /**
   * How long a repeat waits for a first request still running under its
   * key, in milliseconds, before it answers 409 request_in_progress. Give
   * the store the same lock timeout. Default 5 seconds.
   */
  readonly wait?: number;
  /** The clock keys are stamped and expired with. Default the system clock. */
  readonly clock?: { now(): Date };
  /**
   * Turns what a handler threw into the problem the client gets (and a
   * final one is stored). Default: an AppError as it is, anything else 500
   * internal_error; a server passes its error handler's own mapping.
   */
  readonly toProblem?: (error: unknown) => AppError;
  /**
   * Called for every outcome, key wait and change of local waiters (metrics).
   * What it throws is logged and ignored. Default none.
   */
  readonly onEvent?: (event: IdempotencyEvent) => void;
}

/** The options after defaults and validation. */
export interface ResolvedOptions {
  readonly store: IdempotencyStore;
  readonly transaction: UnitOfWork;
  readonly scope: (request: FastifyRequest) => string | null | undefined;
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly clock: { now(): Date };
  readonly toProblem: (error: unknown) => AppError;
  readonly onEvent: (event: IdempotencyEvent) => void;
}

/** Defaults of the optional options. */
export const DEFAULTS = Object.freeze({
  ttl: 24 * 60 * 60 * 1000,
  wait: 5000,
});

/** The longest TTL accepted: ten years, far below what a Date can hold. */
const MAX_TTL_MS = 10 * 365 * 24 * 60 * 60 * 1000;
/** The longest wait accepted: what a Node.js timer can hold (about 24.8 days). */
const MAX_WAIT_MS = 2 ** 31 - 1;
/** The plugin's options, and what Fastify itself reads from register options. */
const KNOWN_OPTIONS: ReadonlySet<string> = new Set([
  'store',
  'transaction',
  'scope',
  'ttl',
  'wait',
  'clock',
  'toProblem',
  'onEvent',
  'prefix',
  'logLevel',
  'logSerializers',
]);

const systemClock = { now: (): Date => new Date() };

/** The first catalogue code of each 4xx status (for errors that carry only a status). */
const CODE_OF_STATUS: ReadonlyMap<number, ProblemCode> = new Map(
  (Object.entries(problemCatalogue) as [ProblemCode, { status: number }][])
    .filter(([code, d]) => d.status >= 400 && d.status < 500 && code !== 'request_in_progress')
    .reverse()
    .map(([code, d]) => [d.status, code]),
);

/**
 * The default problem mapping, for an application that gives none: an
 * AppError as it is; Fastify's validation error as `400 validation_failed`
 * with a pointer per failed rule (`#body/...`, kernel/errs
 * `validationProblem`, as the server's own mapping); an error carrying a 4xx
 * `statusCode` (@fastify/sensible, @fastify/error) as the catalogue's problem
 * of that status; anything else `500 internal_error`.
 *
 * @param error what a handler threw.
 * @returns the problem.
 */
export function defaultToProblem(error: unknown): AppError {
  if (isAppError(error)) return error;
  const e = (typeof error === 'object' && error !== null ? error : {}) as {
    statusCode?: unknown;
  };
  const invalid = validationProblem(error);
  if (invalid !== undefined) return invalid;
  const code = typeof e.statusCode === 'number' ? CODE_OF_STATUS.get(e.statusCode) : undefined;
  if (code !== undefined) return problem(code, problemCatalogue[code].title, { cause: error });
  return new AppError('internal_error', 'An unexpected error occurred.', { cause: error });
}

function hasMethods(value: unknown, names: readonly string[]): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    names.every((n) => typeof (value as Record<string, unknown>)[n] === 'function')
  );
}

function milliseconds(name: string, value: unknown, fallback: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0 || value > max) {
    throw new FST_IDEMPOTENCY_INVALID_OPTION(
      name,
      `must be a whole number of milliseconds from 1 to ${String(max)}, got ${typeof value === 'number' ? String(value) : typeof value}`,
    );
  }
  return value;
}

function optionalFunction<F>(name: string, value: unknown, fallback: F): F {
  if (value === undefined) return fallback;
  if (typeof value !== 'function') {
    throw new FST_IDEMPOTENCY_INVALID_OPTION(name, `must be a function, got ${typeof value}`);
  }
  return value as F;
}

/**
 * Applies the defaults and validates every option.
 *
 * @param options what the user registered the plugin with.
 * @returns the options to run with.
 * @throws FST_IDEMPOTENCY_INVALID_OPTION naming the first bad option.
 */
export function resolveOptions(options: unknown): ResolvedOptions {
  if (typeof options !== 'object' || options === null) {
    throw new FST_IDEMPOTENCY_INVALID_OPTION('options', 'must be an object');
  }
  const unknown = Object.keys(options).find((name) => !KNOWN_OPTIONS.has(name));
  if (unknown !== undefined) {
    throw new FST_IDEMPOTENCY_INVALID_OPTION(unknown, 'is not an option of this plugin');
  }
  const o = options as Partial<Record<keyof IdempotencyOptions, unknown>>;
  if (!hasMethods(o.store, ['recall', 'take', 'begin', 'completeAtCommit'])) {
    throw new FST_IDEMPOTENCY_INVALID_OPTION(
      'store',
      'is required: an IdempotencyStore (recall, take, begin, completeAtCommit)',
    );
  }
  if (!hasMethods(o.transaction, ['run', 'decide', 'inTransaction'])) {
    throw new FST_IDEMPOTENCY_INVALID_OPTION(
      'transaction',
      'is required: the UnitOfWork the handlers join (run, decide, inTransaction)',
    );
  }
  if (typeof o.scope !== 'function') {
    throw new FST_IDEMPOTENCY_INVALID_OPTION(
      'scope',
      'is required: (request) => the owner of its keys, or null for an anonymous caller',
    );
  }
  const clock = o.clock ?? systemClock;
  if (!hasMethods(clock, ['now'])) {
    throw new FST_IDEMPOTENCY_INVALID_OPTION('clock', 'must have a now() method returning a Date');
  }
  return {
    store: o.store as IdempotencyStore,
    transaction: o.transaction as UnitOfWork,
    scope: o.scope as (request: FastifyRequest) => string | null | undefined,
    ttlMs: milliseconds('ttl', o.ttl, DEFAULTS.ttl, MAX_TTL_MS),
    waitMs: milliseconds('wait', o.wait, DEFAULTS.wait, MAX_WAIT_MS),
    clock: clock as { now(): Date },
    toProblem: optionalFunction('toProblem', o.toProblem, defaultToProblem),
    onEvent: optionalFunction('onEvent', o.onEvent, () => undefined),
  };
}
