/**
 * The HTTP server: Fastify 5 with the TypeBox type provider, the request
 * context, the correlation id and the one error handler that answers every
 * failure as RFC 9457 problem+json. Built without listening, so tests use it
 * through `inject` or on a port of their own.
 */
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Settings as TypeBoxSettings } from 'typebox/system';
import type { Authenticator } from '../../kernel/actor/index.js';
import type { Clock } from '../../kernel/clock/index.js';
import type { Metrics } from '../../kernel/metrics/index.js';
import { isUuid, newId } from '../../kernel/ids/index.js';
import { newRequestContext, runWithContext } from '../../kernel/context/index.js';
import { problem } from '../../kernel/errs/index.js';
import type { Exposition } from '../metrics/index.js';
import { documentKeyedRoute } from './idempotency/index.js';
import { PROBLEM_CONTENT_TYPE, sendProblem } from './problem-reply.js';
import { noStoreHook, notModifiedHook } from './caching.js';
import { rangeReplyHook, rangeRequestHook } from './range.js';
import { registerIdempotency, type IdempotencyStage } from './idempotency-stage.js';
import {
  allowedMethods,
  clientErrorHandler,
  clientWentAway,
  connectRefusal,
  framingRefusal,
  unmetExpectationHandler,
} from './refusals.js';
import { jsonBodyParser } from './body.js';
import { guardPipelinedReads, lingerOnClose, pipeliningGuard } from './limits.js';
import { registerProbes } from './probes.js';
import { registerAuthenticationAndRateLimit } from './rate-limit.js';
import { toAppError, VALIDATION_SCAN_LIMIT } from './problems.js';
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
export { clientErrorHandler } from './refusals.js';
export type { IdempotencyStage } from './idempotency-stage.js';

/** Options of {@link createHttpServer}. */
export interface HttpServerOptions {
  /** The process logger (platform/log); request lines carry the correlation id. */
  readonly logger: FastifyBaseLogger;
  /**
   * Registers the tracing instrumentation (platform/tracing's HTTP server
   * spans) before anything else, so every hook and route runs inside the
   * request's span; absent when tracing is off.
   */
  readonly instrument?: (app: FastifyInstance) => Promise<void>;
  /** Default body limit in bytes (`http.body_limit`). */
  readonly bodyLimit: number;
  /**
   * Resolves when the database is reachable; rejects otherwise (`/readyz`).
   * Called at most once a second: probes in between share the last check.
   */
  readonly readiness: () => Promise<void>;
  /** The service name (`app.name`): the API document's title. */
  readonly appName: string;
  /** The API document's version. */
  readonly apiVersion: string;
  /** Resolves bearer tokens (the identity module). */
  readonly authenticator: Authenticator;
  /** The kernel clock. */
  readonly clock: Clock;
  /**
   * Requests one connection may have waiting for answers at once
   * (`http.max_pipelined_requests`); more close the connection. Default 16.
   */
  readonly maxPipelinedRequests?: number;
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
   * The metrics route (`metrics.enabled`, `metrics.listener` api,
   * `metrics.path`): a scrape, without authentication, rate limited by
   * address, hidden from the API document. Without it no such route exists.
   */
  readonly metricsRoute?: {
    /** Where it is served, e.g. `/metrics`. */
    readonly path: string;
    /** Renders a scrape. */
    readonly exposition: () => Promise<Exposition>;
  };
}

/** Where the API document's UI is served. */
export const DOCS_PREFIX = '/docs';

/** How many findings a validator collects before it stops looking (problems.ts). */
export { VALIDATION_SCAN_LIMIT };

export { sendProblem };

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
 * Creates the server with the cross-cutting stages registered in the order
 * platform/http/README.md numbers them and docs/architecture/overview.md
 * ("The request path") lists: the pipelining guard (0), correlation (1),
 * routing (2), authentication (3), rate limit (4), body parsing (5); the
 * idempotency plugin (6) and validation with the handler (7) come per
 * route. Routes are added by the caller (modules' http/ folders) before
 * `ready()`.
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
    // Node.js answers a request without Host with an empty 400 of its own;
    // framingRefusal answers it as a problem.
    http: { requireHostHeader: false },
    // What the router refuses before routing (a bad percent escape, a path
    // parameter over 100 characters) is a problem like any other refusal.
    // No hook runs for these, so the framing is checked here too, and the
    // connection is closed: the request is malformed either way.
    frameworkErrors: (error, req, reply) => {
      reply.header('correlation-id', req.id);
      reply.header('connection', 'close');
      const path = { errors: [{ pointer: '#path', code: 'invalid' }] };
      const appError =
        framingRefusal(req.raw) ??
        (error.code === 'FST_ERR_BAD_URL' || error.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? problem('validation_failed', 'The request path is not valid.', path)
          : toAppError(error));
      void sendProblem(reply, appError, req.id);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
  if (options.instrument !== undefined) await options.instrument(app);
  // Node.js keeps only the first header lines (maxHeadersCount, 2000 names
  // and values: about a thousand lines) and drops the rest silently: an
  // Idempotency-Key after them would vanish and the request run unkeyed,
  // its effect repeated by every retry. The head size limit (16 KiB)
  // already bounds the number of lines, so no count limit is needed.
  app.server.maxHeadersCount = 0;
  // An Expect other than 100-continue: a problem, not Node.js's empty 417.
  app.server.on('checkExpectation', unmetExpectationHandler);
  // CONNECT asks for a tunnel: this server is no proxy. Without a listener
  // Node.js closes the socket without a word.
  app.server.on('connect', connectRefusal);

  // An application rule, not the plugin's: every write route states
  // whether it is keyed, and every keyed route is guarded by the plugin.
  writeRoutePolicy(app, { keyed: options.idempotency !== undefined });

  // Stage 5, body parsing (body.ts): bodies are JSON or nothing: any other content type is 415 before parsing.
  // JSON bodies refuse prototype poisoning, duplicate members, and what
  // PostgreSQL's jsonb cannot hold.
  app.removeContentTypeParser(['text/plain', 'application/json']);
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, jsonBodyParser);

  // Stage 0, before anything else: a connection with too many requests awaiting
  // answers is closed, the request over the limit never parsed (read
  // guard) or, should one get through, never run (the hook). One line and
  // one count per connection, not per request: a flood of pipelined
  // requests must not turn into a flood of log.
  const maxPipelined = options.maxPipelinedRequests ?? 16;
  const pipeliningClosed = options.metrics.counter(
    'http_pipelining_closed_total',
    'Connections closed for sending a request while http.max_pipelined_requests awaited answers.',
    [],
  );
  guardPipelinedReads(app.server, maxPipelined, ({ socket, waiting }) => {
    pipeliningClosed.inc();
    options.logger.info(
      { remoteAddress: socket.remoteAddress, waiting },
      'pipelining limit: connection closed',
    );
  });
  app.addHook('onRequest', pipeliningGuard(maxPipelined));

  // Stage 1, correlation: echo the id and open the request context.
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('correlation-id', req.id);
    // Framing a front proxy may read otherwise is refused before anything
    // else runs, and the connection closed: what follows on it is
    // ambiguous.
    const framing = framingRefusal(req.raw);
    if (framing !== undefined) {
      reply.header('connection', 'close');
      done(framing);
      return;
    }
    // Callback style: everything after this hook runs inside the context.
    runWithContext(newRequestContext(req.id), done);
  });

  // A client that left while an earlier stage waited (the token lookup)
  // has a request whose body will never arrive and whose stream will emit
  // nothing more: the body reader would wait forever, the request never
  // finished. It is answered (to nobody) as a client that went away.
  app.addHook('preParsing', (req, _reply, payload, done) => {
    if (req.raw.destroyed && !req.raw.complete) {
      done(
        Object.assign(new Error('the request closed before its body was read'), {
          code: 'ERR_STREAM_PREMATURE_CLOSE',
        }),
      );
      return;
    }
    done(null, payload);
  });

  // Every answer, a problem or a replay included, passes onSend: the one
  // place where no route or plugin can reset the header away. API answers
  // carry principals' data and one-time secrets (a new token); probes say
  // what is true now. The API document and its UI keep @fastify/static's
  // validators (docs/DECISIONS.md).
  app.addHook('onSend', noStoreHook);
  // An answer that closes the connection before its request's body was
  // read (a 413, a 415, a refused framing): the close lingers, so a client
  // still writing reads the answer instead of a reset.
  app.addHook('onSend', (req, reply, payload, done) => {
    if (!req.raw.complete && String(reply.getHeader('connection')).toLowerCase() === 'close') {
      lingerOnClose(req.raw.socket);
    }
    done(null, payload);
  });
  // A read whose ETag the client already holds: 304, no body.
  app.addHook('onSend', notModifiedHook);

  // Stages 3 and 4, authentication then rate limit (rate-limit.ts).
  await registerAuthenticationAndRateLimit(app, options);

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
  // Byte ranges of the static files, by RFC 9110 rather than by
  // @fastify/send's lenient reading of them (range.ts). The hooks live in
  // the scope of the API document's UI, whose files are the only answers
  // with ranges: no API request runs them, and none of its answers can be
  // cut.
  await app.register(async (docs) => {
    docs.addHook('onRequest', rangeRequestHook);
    docs.addHook('onSend', rangeReplyHook);
    await docs.register(swaggerUi, { routePrefix: DOCS_PREFIX });
  });

  // Stage 6, idempotency: per keyed route, before validation and around the handler.
  if (options.idempotency !== undefined) {
    await registerIdempotency(app, options.idempotency, options);
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

  // Stage 2, routing: a path only another method answers is 405 with Allow.
  app.setNotFoundHandler((req, reply) => {
    const allow = allowedMethods(app, req.url, app.initialConfig.maxParamLength ?? 100);
    // A route of this method took the path and found nothing (a missing
    // static file): that is a 404, not another method's path.
    if (allow.length > 0 && !allow.includes(req.method)) {
      return sendProblem(
        reply,
        problem('method_not_allowed', `This path answers ${allow.join(', ')}, not ${req.method}.`, {
          headers: { allow: allow.join(', ') },
        }),
        req.id,
      );
    }
    return sendProblem(
      reply,
      toAppError(Object.assign(new Error('not found'), { statusCode: 404 })),
      req.id,
    );
  });

  // The probes and the metrics scrape (probes.ts).
  registerProbes(app, options);

  return app;
}
