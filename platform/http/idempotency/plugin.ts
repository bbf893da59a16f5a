/**
 * The idempotency plugin: a route that declares `config.idempotent` and gets
 * an `Idempotency-Key` from an authenticated caller takes effect exactly once,
 * because the key row and the request's effect commit in one transaction.
 *
 * Per keyed route (attached in `onRoute`, so other routes pay nothing):
 * - a route-level `preValidation` hook parses the key, refuses a query string,
 *   computes the fingerprint and tries the replay fast path (one read, no
 *   transaction);
 * - the route's handler is wrapped: the wrapper owns each attempt inside the
 *   unit of work (take the key, savepoint, validation result, handler with
 *   the answer captured, store the final answer, commit) and sends the bytes
 *   only after the commit.
 * See docs/architecture/idempotency.md for the sequence and the rules.
 */
import { performance } from 'node:perf_hooks';
import fp from 'fastify-plugin';
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  RouteHandlerMethod,
  RouteOptions,
  preValidationHookHandler,
} from 'fastify';
import { isPrincipal } from '../../../kernel/actor/index.js';
import type { Clock } from '../../../kernel/clock/index.js';
import { currentContext } from '../../../kernel/context/index.js';
import { AppError, problem, toProblemBody, type ProblemBody } from '../../../kernel/errs/index.js';
import { isUuid, type Id } from '../../../kernel/ids/index.js';
import {
  clearOneTimeSecret,
  isRequestInProgress,
  oneTimeSecretMarked,
  type IdempotencyEntry,
  type IdempotencyRequest,
  type IdempotencyStore,
} from '../../../kernel/idempotency/index.js';
import type { Metrics } from '../../../kernel/metrics/index.js';
import { isRetryable, type UnitOfWork } from '../../../kernel/txn/index.js';
import { canonicalJson } from '../../jsoncanon/index.js';
import { toAppError } from '../problems.js';
import { checkKeyedRoute, routeLabel, RouteRefusedError, type KeyedRoute } from './checks.js';
import { fingerprint } from './fingerprint.js';
import { KEY_HEADER, readKeyHeader } from './key.js';

/** Content type of JSON answers of keyed routes. */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';
/** Content type of problem answers. */
const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';
/** The response header that marks a stored answer given again. */
export const REPLAY_HEADER = 'idempotent-replay';

/** Every way a keyed request can end; one per request, on its log line and in the counter. */
export type Outcome =
  | 'stored'
  | 'replayed'
  | 'reused'
  | 'in_progress'
  | 'secret_repeat'
  | 'not_stored'
  | 'commit_failed'
  | 'invalid_key';

/** Options of the plugin. */
export interface IdempotencyOptions {
  /** Where keys and answers live (module sync's PgIdempotencyStore). */
  readonly store: IdempotencyStore;
  /** The unit of work the handler's use cases join. */
  readonly uow: UnitOfWork;
  /** Key time to live (`sync.idempotency_key_ttl`), in ms. */
  readonly ttlMs: number;
  /**
   * How long a repeat waits for a first request under the same key
   * (`database.lock_timeout`), in ms: in memory when the first runs in the
   * same process, at the key's primary key otherwise.
   */
  readonly waitMs: number;
}

/** What the plugin needs besides its options: the kernel clock and metrics. */
export interface IdempotencyPluginOptions extends IdempotencyOptions {
  readonly clock: Clock;
  readonly metrics: Metrics;
  /**
   * Every route of the server with its config, recorded from the server's
   * first onRoute hook; on `onReady` the plugin asserts it saw every keyed
   * route and that every write route states `idempotent`.
   */
  readonly allRoutes?: () => readonly RouteOptions[];
}

/** The keyed state of one request, set by the preValidation hook. */
interface KeyedState {
  readonly principalId: Id;
  readonly key: Id;
  readonly sha256: Buffer;
  readonly route: KeyedRoute;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The body bytes as received (JSON bodies), for the fingerprint. */
    rawBody: Buffer | null;
    /** Set on keyed requests by the idempotency plugin. */
    idempotencyState: unknown;
  }
}

const WRITE_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
/** Final problems: stored after rolling back to the savepoint. */
const FINAL_PROBLEMS: ReadonlySet<number> = new Set([400, 403, 404, 409, 410, 412, 413, 415, 422]);

/** An answer captured, not yet sent. */
interface Captured {
  readonly status: number;
  /** The JSON value of the body, or null for an empty answer. */
  readonly body: unknown;
  /** The problem code when the answer is a problem. */
  readonly code: string | undefined;
  /** Headers of a problem (Retry-After, WWW-Authenticate): sent, never stored. */
  readonly headers: Readonly<Record<string, string>>;
}

/** Thrown inside the attempt when `begin` finds an existing row: roll back, answer from it. */
class Decided extends Error {
  constructor(readonly entry: IdempotencyEntry) {
    super('key already decided');
  }
}
/** Thrown inside the handler's savepoint when `take` found a row: roll back to it, then `begin`. */
class NotTaken extends Error {
  constructor() {
    super('a row exists for the key');
  }
}
/** Thrown inside the attempt for an answer that is not stored: roll back, send it. */
class NotStored extends Error {
  constructor(readonly captured: Captured) {
    super('answer not stored');
  }
}

const KEY_HINT =
  'Send a UUIDv7 (for example 0190f2a4-1b2c-7d3e-8f40-123456789abc), bare or in double quotes.';

function toArray<T>(v: T | T[] | undefined): T[] {
  if (v === undefined) return [];
  return Array.isArray(v) ? v : [v];
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return (
    Buffer.compare(
      Buffer.from(a.buffer, a.byteOffset, a.byteLength),
      Buffer.from(b.buffer, b.byteOffset, b.byteLength),
    ) === 0
  );
}

function isSecretMarker(body: unknown): boolean {
  return (
    typeof body === 'object' &&
    body !== null &&
    Object.keys(body).length === 1 &&
    (body as Record<string, unknown>)['one_time_secret'] === true
  );
}

function idempotency(
  app: FastifyInstance,
  options: IdempotencyPluginOptions,
  done: (err?: Error) => void,
): void {
  const { store, uow, clock, ttlMs } = options;
  const outcomes = options.metrics.counter(
    'idempotency_requests_total',
    'Keyed requests by route and outcome.',
    ['route', 'outcome'],
  );
  const waits = options.metrics.histogram(
    'idempotency_key_wait_seconds',
    'Time spent taking an idempotency key (waiting on a concurrent first request included).',
    ['route'],
  );
  const guarded = new Set<string>();
  /**
   * Keyed attempts running in this process, by principal and key. A duplicate
   * waits here, in memory, instead of on a pool connection at the key's
   * primary key: N duplicates must not starve the pool for everyone else.
   */
  const inflight = new Map<string, Promise<void>>();
  const localWaiters = options.metrics.gauge(
    'idempotency_local_waiters',
    'Keyed requests waiting in memory for a first request under the same key in this process.',
    [],
  );
  let waitingNow = 0;
  localWaiters.set({}, 0);

  /**
   * Takes this process's turn on a key: waits while another local attempt
   * holds it (up to the wait budget), then registers this request as the
   * holder in the same tick as the check, so waiters woken together cannot
   * all proceed.
   *
   * @returns how to give the turn back and whether this request waited, or
   *   null when the budget ran out.
   */
  const takeLocalTurn = async (
    flightKey: string,
    route: KeyedRoute,
  ): Promise<{ release: () => void; waited: boolean } | null> => {
    const deadline = performance.now() + options.waitMs;
    const started = performance.now();
    let waited = false;
    try {
      for (
        let ahead = inflight.get(flightKey);
        ahead !== undefined;
        ahead = inflight.get(flightKey)
      ) {
        const left = deadline - performance.now();
        if (left <= 0) return null;
        if (!waited) {
          waited = true;
          waitingNow++;
          localWaiters.set({}, waitingNow);
        }
        let timer: NodeJS.Timeout | undefined;
        const finished = await Promise.race([
          ahead.then(() => true),
          new Promise<boolean>((resolve) => {
            timer = setTimeout(() => {
              resolve(false);
            }, left);
          }),
        ]);
        clearTimeout(timer);
        if (!finished) return null;
      }
      // No holder now, and nothing has run since the check: register.
      const { promise: mine, resolve } = Promise.withResolvers<undefined>();
      inflight.set(flightKey, mine);
      return {
        waited,
        release: () => {
          if (inflight.get(flightKey) === mine) inflight.delete(flightKey);
          resolve(undefined);
        },
      };
    } finally {
      if (waited) {
        waitingNow--;
        localWaiters.set({}, waitingNow);
        waits.observe({ route: route.operationId }, (performance.now() - started) / 1000);
      }
    }
  };

  app.decorateRequest('idempotencyState', null);
  if (!app.hasRequestDecorator('rawBody')) app.decorateRequest('rawBody', null);

  const record = (
    req: FastifyRequest,
    reply: FastifyReply,
    route: KeyedRoute,
    outcome: Outcome,
  ): void => {
    outcomes.inc({ route: route.operationId, outcome });
    const child = req.log.child({ idempotency_outcome: outcome });
    req.log = child;
    reply.log = child;
  };

  /** Sends an answer as canonical bytes with the headers derived from the route. */
  const send = (
    reply: FastifyReply,
    route: KeyedRoute,
    status: number,
    body: unknown,
    resourceId: Id | null,
    replay: boolean,
  ): FastifyReply => {
    reply.code(status);
    if (replay) reply.header(REPLAY_HEADER, 'true');
    if (status === 201 && route.location !== undefined && resourceId !== null) {
      reply.header('location', route.location.replace('{id}', resourceId));
    }
    if (body === null || body === undefined) return reply.send();
    if (route.etagStatuses.has(status) && typeof body === 'object') {
      const version = (body as Record<string, unknown>)['version'];
      if (Number.isInteger(version)) reply.header('etag', `"${String(version)}"`);
    }
    return reply
      .type(status >= 400 ? PROBLEM_CONTENT_TYPE : JSON_CONTENT_TYPE)
      .send(canonicalJson(body));
  };

  const sendProblemNow = (
    req: FastifyRequest,
    reply: FastifyReply,
    err: AppError,
    replay: boolean,
  ): FastifyReply => {
    if (err.retryAfterSeconds !== undefined)
      reply.header('retry-after', String(err.retryAfterSeconds));
    if (replay) reply.header(REPLAY_HEADER, 'true');
    return reply
      .code(err.status)
      .type(PROBLEM_CONTENT_TYPE)
      .send(canonicalJson(toProblemBody(err, req.id)));
  };

  /** Answers from an existing row: replay, reuse, one-time secret, or (defensively) in progress. */
  const answerExisting = (
    req: FastifyRequest,
    reply: FastifyReply,
    state: KeyedState,
    entry: IdempotencyEntry,
  ): FastifyReply => {
    const { route } = state;
    if (!entry.completed) {
      record(req, reply, route, 'in_progress');
      return sendProblemNow(req, reply, inProgress(), false);
    }
    if (!sameBytes(entry.sha256, state.sha256)) {
      record(req, reply, route, 'reused');
      return sendProblemNow(
        req,
        reply,
        problem('idempotency_key_reuse', 'This Idempotency-Key was used for a different request.', {
          hint: 'Use a new key for a new request; repeat a request only with its own key.',
        }),
        false,
      );
    }
    if (entry.status >= 200 && entry.status < 300 && isSecretMarker(entry.body)) {
      record(req, reply, route, 'secret_repeat');
      return sendProblemNow(
        req,
        reply,
        problem(
          'conflict',
          'The answer to this request carried a one-time secret, which is never stored or shown again.',
          {
            reason: 'one_time_secret',
            hint: 'Create a new one with a new Idempotency-Key.',
          },
        ),
        true,
      );
    }
    record(req, reply, route, 'replayed');
    return send(reply, route, entry.status, entry.body, entry.resourceId, true);
  };

  const inProgress = (): AppError =>
    problem(
      'request_in_progress',
      'The first request with this Idempotency-Key is still running.',
      {
        retryAfterSeconds: 1,
        hint: 'Repeat the request with the same key after Retry-After.',
      },
    );

  /** Route-level preValidation: key, query string, fingerprint, replay fast path. */
  const fastPath =
    (route: KeyedRoute): preValidationHookHandler =>
    async (req, reply) => {
      const actor = currentContext()?.actor;
      // Keys belong to principals: an anonymous caller's key is ignored.
      if (actor === undefined || !isPrincipal(actor)) return;
      const header = readKeyHeader(req.raw.rawHeaders);
      if (header.kind === 'absent') {
        if (!route.required) return;
        record(req, reply, route, 'invalid_key');
        throw problem('validation_failed', `This route requires an ${KEY_HEADER} header.`, {
          errors: [{ pointer: `#header/${KEY_HEADER}`, code: 'required' }],
          hint: KEY_HINT,
        });
      }
      if (header.kind === 'invalid') {
        record(req, reply, route, 'invalid_key');
        throw problem('validation_failed', `The ${KEY_HEADER} header is not a UUIDv7.`, {
          errors: [{ pointer: `#header/${KEY_HEADER}`, code: 'invalid_format' }],
          hint: KEY_HINT,
        });
      }
      const rawUrl = req.raw.url ?? req.url;
      if (rawUrl.includes('?')) {
        record(req, reply, route, 'invalid_key');
        throw problem(
          'validation_failed',
          'A request with an Idempotency-Key may not carry a query string.',
          {
            errors: [{ pointer: '#query', code: 'not_allowed' }],
            hint: 'Put every input of a keyed request in its path or body.',
          },
        );
      }
      const ifMatch = req.headers['if-match'];
      const ifNoneMatch = req.headers['if-none-match'];
      const state: KeyedState = {
        principalId: actor.principalId,
        key: header.key,
        route,
        sha256: fingerprint({
          method: req.method,
          rawUrl,
          ifMatch: Array.isArray(ifMatch) ? ifMatch.join(', ') : ifMatch,
          ifNoneMatch: Array.isArray(ifNoneMatch) ? ifNoneMatch.join(', ') : ifNoneMatch,
          body: req.rawBody ?? undefined,
        }),
      };
      req.idempotencyState = state;
      const found = await store.find(state.principalId, state.key, clock.now());
      if (found) return answerExisting(req, reply, state, found);
    };

  /** Turns a handler's payload into a captured answer, shaped by the route's serializer. */
  const capturePayload = (reply: FastifyReply, payload: unknown): Captured => {
    const status = reply.statusCode;
    if (payload === undefined || payload === null)
      return { status, body: null, code: undefined, headers: {} };
    if (Buffer.isBuffer(payload) || typeof (payload as { pipe?: unknown }).pipe === 'function') {
      throw new Error('a keyed handler must return a JSON value, not a Buffer or a stream');
    }
    const serialized = reply.serialize(payload);
    const text =
      typeof serialized === 'string'
        ? serialized
        : Buffer.from(serialized as ArrayBuffer).toString('utf8');
    return { status, body: JSON.parse(text) as unknown, code: undefined, headers: {} };
  };

  const captureError = (req: FastifyRequest, err: unknown): Captured => {
    const appError = toAppError(err);
    if (appError.status >= 500) req.log.error({ err }, 'keyed request failed');
    const headers: Record<string, string> = { ...(appError.headers ?? {}) };
    if (appError.retryAfterSeconds !== undefined)
      headers['retry-after'] = String(appError.retryAfterSeconds);
    const body: ProblemBody = toProblemBody(appError, req.id);
    return { status: appError.status, body, code: appError.code, headers };
  };

  /**
   * Forbids `reply.send` and `reply.hijack` while a keyed handler runs: the
   * plugin sends after the commit. The guard can be lifted early
   * (`guard.active = false`) when the attempt ends while the handler still
   * runs (its transaction died under it), so the plugin can answer at once.
   */
  const guarded_ = async <T>(
    reply: FastifyReply,
    guard: { active: boolean },
    fn: () => Promise<T>,
  ): Promise<T> => {
    const proto = Object.getPrototypeOf(reply) as {
      send: FastifyReply['send'];
      hijack: FastifyReply['hijack'];
    };
    const forbidden = (name: 'send' | 'hijack') =>
      function (this: FastifyReply, ...args: unknown[]): unknown {
        if (guard.active) {
          throw new Error(
            'a keyed handler must return its payload or throw; it may not call reply.send or reply.hijack',
          );
        }
        return (proto[name] as (...a: unknown[]) => unknown).apply(this, args);
      };
    guard.active = true;
    Object.defineProperty(reply, 'send', {
      value: forbidden('send'),
      configurable: true,
      writable: true,
    });
    Object.defineProperty(reply, 'hijack', {
      value: forbidden('hijack'),
      configurable: true,
      writable: true,
    });
    try {
      return await fn();
    } finally {
      guard.active = false;
      delete (reply as unknown as Record<string, unknown>)['send'];
      delete (reply as unknown as Record<string, unknown>)['hijack'];
    }
  };

  const wrap = (original: RouteHandlerMethod, route: KeyedRoute): RouteHandlerMethod =>
    async function keyedHandler(this: FastifyInstance, req, reply) {
      const state = req.idempotencyState as KeyedState | null;
      if (state === null) {
        // Not a keyed request (no key, or an anonymous caller): plain route.
        if (req.validationError) throw req.validationError;
        return original.call(this, req, reply);
      }
      const turn = await takeLocalTurn(`${state.principalId}/${state.key}`, route);
      if (turn === null) {
        record(req, reply, route, 'in_progress');
        return sendProblemNow(req, reply, inProgress(), false);
      }
      let found: IdempotencyEntry | null = null;
      try {
        // The first request here has ended: its answer may now be stored.
        if (turn.waited) found = await store.find(state.principalId, state.key, clock.now());
      } catch (err) {
        turn.release();
        throw err;
      }
      if (found) {
        turn.release();
        return answerExisting(req, reply, state, found);
      }
      try {
        return await attempt(original, this, req, reply, state, route);
      } finally {
        turn.release();
      }
    };

  /** One keyed request's attempts inside the unit of work, then the answer. */
  const attempt = async (
    original: RouteHandlerMethod,
    instance: FastifyInstance,
    req: FastifyRequest,
    reply: FastifyReply,
    state: KeyedState,
    route: KeyedRoute,
  ): Promise<FastifyReply> => {
    {
      const pristineBody: unknown = structuredClone(req.body);
      const baseHeaders = { ...reply.getHeaders() };
      const request: Omit<IdempotencyRequest, 'now'> = {
        principalId: state.principalId,
        key: state.key,
        action: route.operationId,
        sha256: state.sha256,
        ttlMs,
      };
      // Objects, not lets: they are set inside the attempt's closure.
      const progress = { completed: false };
      const guard = { active: false };
      let captured: Captured;
      try {
        captured = await uow.run(
          async () => {
            // A fresh attempt: nothing of an earlier one survives.
            progress.completed = false;
            for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
            for (const [name, value] of Object.entries(baseHeaders))
              if (value !== undefined) reply.header(name, value);
            reply.code(200);
            req.body = structuredClone(pristineBody);
            clearOneTimeSecret();
            const keyed: IdempotencyRequest = { ...request, now: clock.now() };
            // The handler runs in a savepoint, so a final answer other than
            // 2xx rolls back its effects and keeps the key row. The key's
            // insert is sent first and the savepoint goes with it in one
            // round trip; when the insert finds a row (a duplicate, an
            // expired key), the handler never starts: roll back to the
            // savepoint, then begin does the full work outside it.
            const handle = (first?: () => Promise<void>): Promise<Captured> =>
              uow.run(
                async () => {
                  await first?.();
                  if (req.validationError) throw req.validationError;
                  const payload = await guarded_<unknown>(
                    reply,
                    guard,
                    async () => await original.call(instance, req, reply),
                  );
                  const c = capturePayload(reply, payload);
                  // Anything but a 2xx from a returned payload is rolled back to the savepoint.
                  if (c.status < 200 || c.status > 299) throw new NotStored(c);
                  return c;
                },
                { nested: true },
              );
            const asAnswer = (err: unknown): Captured => {
              if (isRetryable(err)) throw err;
              return err instanceof NotStored ? err.captured : captureError(req, err);
            };
            const started = performance.now();
            const waited = (): void => {
              waits.observe({ route: route.operationId }, (performance.now() - started) / 1000);
            };
            const taking = store.take(keyed).then(
              (taken) => ({ ok: true as const, taken }),
              (error: unknown) => ({ ok: false as const, error }),
            );
            let answer: Captured;
            try {
              answer = await handle(async () => {
                const took = await taking;
                if (!took.ok || !took.taken) throw new NotTaken();
                waited();
              });
            } catch (err) {
              const took = await taking;
              // The insert failed (in progress, connection lost): the
              // transaction is aborted, and the savepoint with it.
              if (!took.ok) {
                waited();
                throw took.error;
              }
              if (!(err instanceof NotTaken)) {
                answer = asAnswer(err);
              } else {
                let existing: IdempotencyEntry | null;
                try {
                  existing = await store.begin(keyed);
                } finally {
                  waited();
                }
                if (existing) throw new Decided(existing);
                try {
                  answer = await handle();
                } catch (err2) {
                  answer = asAnswer(err2);
                }
              }
            }
            const success = answer.status >= 200 && answer.status <= 299;
            const finalProblem =
              FINAL_PROBLEMS.has(answer.status) && answer.code !== 'request_in_progress';
            if (!success && !finalProblem) throw new NotStored(answer);
            const secret = success && (route.oneTimeSecret || oneTimeSecretMarked());
            const resourceId = success ? resourceIdOf(answer.body) : null;
            await store.complete(keyed, {
              status: answer.status,
              body: secret ? { one_time_secret: true } : answer.body,
              resourceId,
            });
            progress.completed = true;
            return answer;
          },
          { name: route.operationId },
        );
      } catch (err) {
        // The attempt is over; a handler still running (its transaction
        // died under it) must not keep the plugin from answering.
        guard.active = false;
        if (err instanceof Decided) return answerExisting(req, reply, state, err.entry);
        if (err instanceof NotStored) {
          record(req, reply, route, 'not_stored');
          for (const [name, value] of Object.entries(err.captured.headers))
            reply.header(name, value);
          return send(reply, route, err.captured.status, err.captured.body, null, false);
        }
        if (isRequestInProgress(err)) {
          record(req, reply, route, 'in_progress');
          return sendProblemNow(req, reply, inProgress(), false);
        }
        if (progress.completed) {
          // The answer was ready but the commit failed: nothing happened, nothing is stored.
          record(req, reply, route, 'commit_failed');
          req.log.error({ err }, 'commit of a keyed request failed');
          return sendProblemNow(
            req,
            reply,
            new AppError('internal_error', 'An unexpected error occurred.'),
            false,
          );
        }
        record(req, reply, route, 'not_stored');
        const appError = toAppError(err);
        if (appError.status >= 500) req.log.error({ err }, 'keyed request failed');
        return sendProblemNow(req, reply, appError, false);
      }
      record(req, reply, route, 'stored');
      // A stored answer leaves with exactly the headers its replay will have:
      // those of the current request (correlation id, rate limit) and those
      // derived from the route; headers the handler set are dropped.
      for (const name of Object.keys(reply.getHeaders())) {
        if (!(name in baseHeaders)) reply.removeHeader(name);
      }
      return send(reply, route, captured.status, captured.body, resourceIdOf(captured.body), false);
    }
  };

  app.addHook('onRoute', (routeOptions) => {
    const methods = toArray(routeOptions.method);
    const flag = routeOptions.config?.idempotent;
    if (flag === undefined && methods.some((m) => WRITE_METHODS.has(m))) {
      throw new RouteRefusedError(
        `${routeLabel(routeOptions)} must state config.idempotent (true, 'required' or false)`,
      );
    }
    if (flag !== true && flag !== 'required') return;
    const route = checkKeyedRoute(routeOptions);
    routeOptions.attachValidation = true;
    routeOptions.preValidation = [...toArray(routeOptions.preValidation), fastPath(route)];
    routeOptions.handler = wrap(routeOptions.handler, route);
    for (const m of methods) guarded.add(`${m} ${routeOptions.url}`);
  });

  app.addHook('onReady', async () => {
    for (const r of options.allRoutes?.() ?? []) {
      const methods = toArray(r.method);
      const flag = r.config?.idempotent;
      if (flag === undefined && methods.some((m) => WRITE_METHODS.has(m))) {
        throw new RouteRefusedError(
          `${routeLabel(r)} must state config.idempotent (true, 'required' or false)`,
        );
      }
      if (
        (flag === true || flag === 'required') &&
        methods.some((m) => !guarded.has(`${m} ${r.url}`))
      ) {
        throw new RouteRefusedError(
          `${routeLabel(r)} is keyed but was registered before the idempotency plugin`,
        );
      }
    }
    await Promise.resolve();
  });
  done();
}

function resourceIdOf(body: unknown): Id | null {
  if (typeof body !== 'object' || body === null) return null;
  const id = (body as Record<string, unknown>)['id'];
  return typeof id === 'string' && isUuid(id) ? (id.toLowerCase() as Id) : null;
}

/**
 * The idempotency plugin, wrapped with fastify-plugin so its hooks apply to
 * the routes of the whole server. Register it before the routes it guards.
 */
export const idempotencyPlugin = fp(idempotency, { name: 'idempotency', fastify: '5.x' });
