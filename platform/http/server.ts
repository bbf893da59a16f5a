/**
 * The HTTP server: Fastify 5 with the TypeBox type provider, the request
 * context, the correlation id and the one error handler that answers every
 * failure as RFC 9457 problem+json. Built without listening, so tests use it
 * through `inject` or on a port of their own.
 */
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Settings as TypeBoxSettings } from 'typebox/system';
import type { Authenticator } from '../../kernel/actor/index.js';
import type { Clock } from '../../kernel/clock/index.js';
import type { Metrics } from '../../kernel/metrics/index.js';
import { isUuid, newId } from '../../kernel/ids/index.js';
import { isPrincipal } from '../../kernel/actor/index.js';
import { currentContext, newRequestContext, runWithContext } from '../../kernel/context/index.js';
import { problem, toProblemBody, type AppError } from '../../kernel/errs/index.js';
import type { IdempotencyStore } from '../../kernel/idempotency/index.js';
import type { UnitOfWork } from '../../kernel/txn/index.js';
import { authenticationHook } from './auth.js';
import type { Exposition } from '../metrics/index.js';
import {
  documentKeyedRoute,
  idempotencyPlugin,
  PROBLEM_CONTENT_TYPE,
  sendProblem as writeProblem,
  type IdempotencyEvent,
} from './idempotency/index.js';
import { jsonBodyParser } from './body.js';
import { toAppError } from './problems.js';
import { writeRoutePolicy } from './route-policy.js';
import './types.js';

/** The Fastify instance type of this application. */
export type HttpServer = FastifyInstance<
  import('node:http').Server,
  import('node:http').IncomingMessage,
  import('node:http').ServerResponse,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** Content type of every problem answer. */
export { PROBLEM_CONTENT_TYPE };

/** The idempotency stage of this server: where keys live and how long. */
export interface IdempotencyStage {
  /** Where keys and answers live (module sync's PgIdempotencyStore). */
  readonly store: IdempotencyStore;
  /** The unit of work the handlers' use cases join. */
  readonly uow: UnitOfWork;
  /** Key time to live (`sync.idempotency_key_ttl`), in ms. */
  readonly ttlMs: number;
  /**
   * How long a repeat waits for a first request under the same key
   * (`database.lock_timeout`), in ms.
   */
  readonly waitMs: number;
}

/** Options of {@link createHttpServer}. */
export interface HttpServerOptions {
  /** The process logger (platform/log); request lines carry the correlation id. */
  readonly logger: FastifyBaseLogger;
  /** Default body limit in bytes (`http.body_limit`). */
  readonly bodyLimit: number;
  /** Resolves when the database is reachable; rejects otherwise (`/readyz`). */
  readonly readiness: () => Promise<void>;
  /** The service name (`app.name`): the API document's title. */
  readonly appName: string;
  /** The API document's version. */
  readonly apiVersion: string;
  /** Resolves bearer tokens (the identity module). */
  readonly authenticator: Authenticator;
  /** The kernel clock. */
  readonly clock: Clock;
  /** Requests per window per principal (or address, for anonymous callers). */
  readonly rateLimit: { readonly max: number; readonly windowMs: number };
  /** Where request counts and durations go. */
  readonly metrics: Metrics;
  /**
   * The idempotency stage (store, unit of work, key TTL). Without it the
   * server has no keyed routes (a route declaring `idempotent` still must).
   */
  readonly idempotency?: IdempotencyStage;
  /**
   * The metrics route (`metrics.enabled`, `metrics.path`): a scrape, without
   * authentication or rate limit, hidden from the API document. Without it
   * no such route exists.
   */
  readonly metricsRoute?: {
    /** Where it is served, e.g. `/metrics`. */
    readonly path: string;
    /** Renders a scrape. */
    readonly exposition: () => Promise<Exposition>;
  };
}

/**
 * The problem for an error of Node.js's HTTP parser: 431 for a head over the
 * limit, 408 for a head or body that did not arrive in time (headersTimeout,
 * requestTimeout), 413 for oversized chunk extensions, 400 otherwise.
 *
 * @param code the parser's error code.
 * @returns the problem to answer.
 */
function parserRefusal(code: string | undefined) {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return problem('request_header_fields_too_large', 'The request head is too large.');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      // A slow client, not a malformed request: it may send it again.
      return problem('request_timeout', 'The request did not arrive in time.');
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return problem('payload_too_large', 'The chunk extensions are too large.');
    default:
      return problem('validation_failed', 'The request is not well-formed HTTP/1.1.', {
        errors: [{ pointer: '#', code: 'malformed_request' }],
      });
  }
}

/**
 * Answers what Node.js's HTTP parser refuses before any route runs (a
 * malformed head or body framing, a head over the size limit, a slow
 * client) with a problem,
 * like every other refusal, instead of Fastify's default
 * `{"error":"Bad Request",...}`. There is no request object yet: the answer
 * gets a fresh correlation id, and the connection is closed: ended, then
 * destroyed once the answer is flushed, even if the client keeps its side
 * open (the server allows half-open connections).
 *
 * @param err the parser's error.
 * @param socket the client's connection.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed || !socket.writable) return;
  const appError = parserRefusal(err.code);
  const id = newId();
  const body = JSON.stringify(toProblemBody(appError, id));
  socket.end(
    `HTTP/1.1 ${String(appError.status)} ${STATUS_CODES[appError.status] ?? ''}\r\n` +
      `content-type: ${PROBLEM_CONTENT_TYPE}\r\ncontent-length: ${String(Buffer.byteLength(body))}\r\n` +
      `correlation-id: ${id}\r\nconnection: close\r\n\r\n${body}`,
    // Ending only our side would leave the connection open for as long as
    // the client keeps its side open: a file descriptor held, and close()
    // (the graceful shutdown) waiting on it. Fastify's default destroys it.
    () => {
      socket.destroy();
    },
  );
}

/**
 * The idempotency plugin's events as this server's metrics: keyed requests
 * by route and outcome, the time spent waiting for a key, and how many
 * requests wait in memory now.
 *
 * @param metrics the server's metrics.
 * @returns the plugin's `onEvent` option.
 */
function idempotencyMetrics(metrics: Metrics): (event: IdempotencyEvent) => void {
  const outcomes = metrics.counter(
    'idempotency_requests_total',
    'Keyed requests by route and outcome.',
    ['route', 'outcome'],
  );
  const waits = metrics.histogram(
    'idempotency_key_wait_seconds',
    'Time spent taking an idempotency key (waiting on a concurrent first request included).',
    ['route'],
  );
  const localWaiters = metrics.gauge(
    'idempotency_local_waiters',
    'Keyed requests waiting in memory for a first request under the same key in this process.',
    [],
  );
  return (event) => {
    switch (event.type) {
      case 'outcome':
        outcomes.inc({ route: event.route, outcome: event.outcome });
        break;
      case 'key_wait':
        waits.observe({ route: event.route }, event.seconds);
        break;
      case 'local_waiters':
        localWaiters.set({}, event.count);
        break;
    }
  };
}

/** Where the API document's UI is served. */
export const DOCS_PREFIX = '/docs';

/**
 * How many findings a TypeBox-compiled validator collects before it stops
 * looking. TypeBox's default is 8, and a validator that filters its
 * findings (the ledger's strict one drops the per-member entries of
 * `additionalProperties: false` for the summary entry that comes after
 * them) was left with an empty list once eight unknown members used up the
 * budget. High enough for any honest request, bounded so a body of
 * thousands of wrong members costs no more than a few milliseconds; the
 * answer lists at most MAX_LISTED_FIELD_ERRORS of them (problems.ts).
 */
export const VALIDATION_SCAN_LIMIT = 1000;

/**
 * Whether a request path is under the API (`/api/...`), whose answers are
 * never to be stored by a cache.
 *
 * @param url the request URL as received, query included.
 * @returns true for `/api` and everything under `/api/`.
 */
export function isApiPath(url: string): boolean {
  const path = url.split('?', 1)[0] ?? '';
  return path === '/api' || path.startsWith('/api/');
}

/** Paths whose answers say what is true now: a cached copy would mislead. */
const UNCACHEABLE_PROBES: ReadonlySet<string> = new Set(['/healthz', '/readyz']);

/** Error codes a request stream fails with when the client's connection is gone. */
const CLIENT_GONE_CODES: ReadonlySet<string> = new Set([
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ERR_STREAM_PREMATURE_CLOSE',
]);

/**
 * Whether an error is the client going away (a reset or closed connection
 * while its request was read or answered) rather than a server fault. Only
 * the request's own stream failing, or a connection error while the
 * client's socket is gone, counts: a database connection reset (also
 * ECONNRESET) while the client is still there stays a server error.
 *
 * @param error what the error handler got.
 * @param req the request.
 * @returns true when the client left.
 */
function clientWentAway(error: unknown, req: FastifyRequest): boolean {
  if (typeof error !== 'object' || error === null) return false;
  if (req.raw.errored === error) return true;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && CLIENT_GONE_CODES.has(code) && req.raw.socket.destroyed;
}

/**
 * Sends an {@link AppError} as problem+json with its headers.
 *
 * @param reply the reply.
 * @param err the problem.
 * @param correlationId the request's correlation id.
 * @returns the reply, sent.
 */
export function sendProblem(
  reply: FastifyReply,
  err: AppError,
  correlationId: string,
): FastifyReply {
  // One writer of problems for the whole server: the idempotency plugin's
  // (keyed answers in canonical bytes; these through the route's serializer).
  return writeProblem(reply, err, correlationId, { canonical: false });
}

/**
 * The correlation id of a request: the client's `Correlation-Id` when it is a
 * UUID (normalised to lower case), else a new UUIDv7. Only UUIDs are taken
 * from outside, so nothing a client sends can forge or break a log line.
 *
 * @param req the raw request.
 * @returns the id.
 */
export function correlationIdOf(req: {
  headers: Record<string, string | string[] | undefined>;
}): string {
  const given = req.headers['correlation-id'];
  return typeof given === 'string' && isUuid(given) ? given.toLowerCase() : newId();
}

/**
 * Creates the server with the cross-cutting stages registered in the order of
 * docs/architecture/overview.md (correlation, routing, authentication, rate
 * limit; the idempotency plugin and validation come per route). Routes are
 * added by the caller (modules' http/ folders) before `ready()`.
 *
 * @param options name, logging, limits, ports and the readiness probe.
 * @returns the Fastify instance, not listening.
 */
export async function createHttpServer(options: HttpServerOptions): Promise<HttpServer> {
  // A process-wide TypeBox setting, set by the one place that turns
  // validation findings into answers; the same value every time.
  TypeBoxSettings.Set({ maxErrors: VALIDATION_SCAN_LIMIT });
  const app = Fastify({
    loggerInstance: options.logger,
    bodyLimit: options.bodyLimit,
    genReqId: (req) => correlationIdOf(req),
    requestIdHeader: false,
    logController: new LogController({ requestIdLogLabel: 'correlation_id' }),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    clientErrorHandler,
    // What the router refuses before routing (a bad percent escape, a path
    // parameter over 100 characters) is a problem like any other refusal.
    frameworkErrors: (error, req, reply) => {
      reply.header('correlation-id', req.id);
      const path = { errors: [{ pointer: '#path', code: 'invalid' }] };
      const appError =
        error.code === 'FST_ERR_BAD_URL' || error.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? problem('validation_failed', 'The request path is not valid.', path)
          : toAppError(error);
      void sendProblem(reply, appError, req.id);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
  // Node.js keeps only the first header lines (maxHeadersCount, 2000 names
  // and values: about a thousand lines) and drops the rest silently: an
  // Idempotency-Key after them would vanish and the request run unkeyed,
  // its effect repeated by every retry. The head size limit (16 KiB)
  // already bounds the number of lines, so no count limit is needed.
  app.server.maxHeadersCount = 0;
  // An Expect other than 100-continue: a problem, not Node.js's empty 417.
  app.server.on('checkExpectation', (_req, res) => {
    const id = newId();
    const body = JSON.stringify(
      toProblemBody(problem('expectation_failed', 'This server meets no such expectation.'), id),
    );
    res.writeHead(417, {
      'content-type': PROBLEM_CONTENT_TYPE,
      'content-length': Buffer.byteLength(body),
      'correlation-id': id,
      connection: 'close',
    });
    res.end(body);
  });

  // An application rule, not the plugin's: every write route states
  // whether it is keyed, and every keyed route is guarded by the plugin.
  writeRoutePolicy(app, { keyed: options.idempotency !== undefined });

  // Bodies are JSON or nothing: any other content type is 415 before parsing.
  // JSON bodies refuse prototype poisoning, duplicate members, and what
  // PostgreSQL's jsonb cannot hold.
  app.removeContentTypeParser(['text/plain', 'application/json']);
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, jsonBodyParser);

  // Stage 1, correlation: echo the id and open the request context.
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('correlation-id', req.id);
    // Callback style: everything after this hook runs inside the context.
    runWithContext(newRequestContext(req.id), done);
  });

  // Every answer, a problem or a replay included, passes onSend: the one
  // place where no route or plugin can reset the header away. API answers
  // carry principals' data and one-time secrets (a new token); probes say
  // what is true now. The API document and its UI keep @fastify/static's
  // validators (docs/DECISIONS.md).
  app.addHook('onSend', (req, reply, payload, done) => {
    if (isApiPath(req.url) || UNCACHEABLE_PROBES.has(req.url.split('?', 1)[0] ?? '')) {
      reply.header('cache-control', 'no-store');
    }
    done(null, payload);
  });

  // Stage 3, authentication: app-level, so it runs before every route-level
  // onRequest hook, the rate limit's included.
  app.addHook('onRequest', authenticationHook(options.authenticator, options.clock));

  // The API document's UI is public.
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith(DOCS_PREFIX)) route.config = { ...route.config, auth: 'none' };
  });

  const requests = options.metrics.counter(
    'http_requests_total',
    'HTTP requests by route and status.',
    ['method', 'route', 'status'],
  );
  const durations = options.metrics.histogram(
    'http_request_duration_seconds',
    'HTTP request durations by route.',
    ['method', 'route'],
  );
  app.addHook('onResponse', (req, reply, done) => {
    const route = req.is404 ? 'unmatched' : (req.routeOptions.url ?? 'unmatched');
    requests.inc({ method: req.method, route, status: reply.statusCode });
    durations.observe({ method: req.method, route }, reply.elapsedTime / 1000);
    done();
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: options.appName, version: options.apiVersion },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: ({ schema, url, route }) => ({
      schema: documentKeyedRoute(
        schema as Record<string, unknown> | undefined,
        route.config?.idempotent,
      ) as typeof schema,
      url,
    }),
  });
  await app.register(swaggerUi, { routePrefix: DOCS_PREFIX });

  // Stage 4, rate limit: route-level onRequest hooks added to every route
  // declared after this registration.
  await app.register(rateLimit, {
    global: true,
    max: options.rateLimit.max,
    timeWindow: options.rateLimit.windowMs,
    enableDraftSpec: true,
    keyGenerator: (req) => {
      const actor = currentContext()?.actor;
      return actor?.kind === 'principal' ? `principal:${actor.principalId}` : `address:${req.ip}`;
    },
    errorResponseBuilder: (_req, context) =>
      problem('rate_limited', 'Too many requests; slow down.', {
        retryAfterSeconds: Math.max(1, Math.ceil(context.ttl / 1000)),
        hint: 'Wait for the time in Retry-After, then repeat the request (with the same Idempotency-Key, if any).',
      }),
  });

  // Stage 5, idempotency: per keyed route, before validation and around the handler.
  if (options.idempotency !== undefined) {
    const stage = options.idempotency;
    await app.register(idempotencyPlugin, {
      store: stage.store,
      transaction: stage.uow,
      ttl: stage.ttlMs,
      wait: stage.waitMs,
      clock: options.clock,
      // Keys belong to principals: an anonymous caller's key has no effect.
      scope: () => {
        const actor = currentContext()?.actor;
        return actor !== undefined && isPrincipal(actor) ? actor.principalId : null;
      },
      toProblem: toAppError,
      onEvent: idempotencyMetrics(options.metrics),
    });
  }

  app.setErrorHandler((error: unknown, req: FastifyRequest, reply: FastifyReply) => {
    if (clientWentAway(error, req)) {
      // Not a server fault: nobody reads the answer, and a stack would only
      // bury real errors. Answered (and counted) as the client's 400.
      const code = (error as { code?: unknown }).code;
      req.log.info({ code }, 'client went away');
      return sendProblem(
        reply,
        problem('validation_failed', 'The request did not arrive completely.', {
          errors: [{ pointer: '#', code: 'incomplete' }],
          cause: error,
        }),
        req.id,
      );
    }
    const appError = toAppError(error);
    if (appError.status >= 500) {
      req.log.error({ err: error }, 'request failed');
    } else {
      req.log.info({ code: appError.code }, 'request refused');
    }
    return sendProblem(reply, appError, req.id);
  });

  app.setNotFoundHandler((req, reply) =>
    sendProblem(
      reply,
      toAppError(Object.assign(new Error('not found'), { statusCode: 404 })),
      req.id,
    ),
  );

  app.get('/healthz', { config: { auth: 'none', rateLimit: false }, schema: { hide: true } }, () =>
    Promise.resolve({ status: 'ok' }),
  );
  app.get(
    '/readyz',
    { config: { auth: 'none', rateLimit: false }, schema: { hide: true } },
    async (req, reply) => {
      try {
        await options.readiness();
        return { status: 'ready' };
      } catch (err) {
        req.log.warn({ err }, 'not ready');
        return sendProblem(
          reply,
          toAppError(Object.assign(new Error('database unreachable'), { statusCode: 503 })),
          req.id,
        );
      }
    },
  );

  const metricsRoute = options.metricsRoute;
  if (metricsRoute !== undefined) {
    app.get(
      metricsRoute.path,
      { config: { auth: 'none', rateLimit: false }, schema: { hide: true } },
      async (_req, reply) => {
        const { contentType, body } = await metricsRoute.exposition();
        return reply.header('cache-control', 'no-store').type(contentType).send(body);
      },
    );
  }

  return app;
}
