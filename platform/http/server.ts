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
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { isUuid, newId } from '../../kernel/ids/index.js';
import { newRequestContext, runWithContext } from '../../kernel/context/index.js';
import { toProblemBody, type AppError } from '../../kernel/errs/index.js';
import { toAppError } from './problems.js';
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
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

/** Options of {@link createHttpServer}. */
export interface HttpServerOptions {
  /** The process logger (platform/log); request lines carry the correlation id. */
  readonly logger: FastifyBaseLogger;
  /** Default body limit in bytes (`http.body_limit`). */
  readonly bodyLimit: number;
  /** Resolves when the database is reachable; rejects otherwise (`/readyz`). */
  readonly readiness: () => Promise<void>;
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
  if (err.retryAfterSeconds !== undefined)
    reply.header('retry-after', String(err.retryAfterSeconds));
  for (const [name, value] of Object.entries(err.headers ?? {})) reply.header(name, value);
  return reply.code(err.status).type(PROBLEM_CONTENT_TYPE).send(toProblemBody(err, correlationId));
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
 * Creates the server with the cross-cutting stages registered; routes are
 * added by the caller (modules' http/ folders) before `ready()`.
 *
 * @param options name, logging, limits and the readiness probe.
 * @returns the Fastify instance, not listening.
 */
export function createHttpServer(options: HttpServerOptions): HttpServer {
  const app = Fastify({
    loggerInstance: options.logger,
    bodyLimit: options.bodyLimit,
    genReqId: (req) => correlationIdOf(req),
    requestIdHeader: false,
    logController: new LogController({ requestIdLogLabel: 'correlation_id' }),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.addHook('onRequest', (req, reply, done) => {
    reply.header('correlation-id', req.id);
    // Callback style: everything after this hook runs inside the context.
    runWithContext(newRequestContext(req.id), done);
  });

  app.setErrorHandler((error: unknown, req: FastifyRequest, reply: FastifyReply) => {
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

  app.get('/healthz', { config: { auth: 'none' }, schema: { hide: true } }, () =>
    Promise.resolve({ status: 'ok' }),
  );
  app.get('/readyz', { config: { auth: 'none' }, schema: { hide: true } }, async (req, reply) => {
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
  });

  return app;
}
