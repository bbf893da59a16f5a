/**
 * The probes and the metrics scrape: `/healthz` (the process answers),
 * `/readyz` (the database answers), and the metrics route when one is
 * given. None needs a token or is in the API document; the probes are not
 * rate limited, the scrape is (per address, like any anonymous call).
 */
import type { FastifyInstance } from 'fastify';
import type { Exposition } from '../metrics/index.js';
import { sendProblem as writeProblem } from './problem-reply.js';
import { toAppError } from './problems.js';

/**
 * Shares one run of a check between callers: while it runs, and for a
 * while after it settled, callers get its outcome.
 *
 * @param ms how long a settled outcome is reused.
 * @param check the check.
 * @returns a function with the check's outcome, shared.
 */
function sharedFor(ms: number, check: () => Promise<void>): () => Promise<void> {
  let last: { at: number; outcome: Promise<void> } | undefined;
  return () => {
    const now = performance.now();
    if (last === undefined || now - last.at >= ms) {
      const outcome = check();
      const entry = { at: Number.POSITIVE_INFINITY, outcome };
      // Fresh until it settles, then for ms more.
      const settle = () => {
        entry.at = performance.now();
      };
      outcome.then(settle, settle);
      last = entry;
    }
    return last.outcome;
  };
}

/** What {@link registerProbes} serves. */
export interface ProbeOptions {
  /** Resolves when the database is reachable; rejects otherwise. */
  readonly readiness: () => Promise<void>;
  /** The metrics route, when the server serves one. */
  readonly metricsRoute?: {
    readonly path: string;
    readonly exposition: () => Promise<Exposition>;
  };
}

/**
 * Adds `/healthz`, `/readyz` and the metrics route.
 *
 * @param app the server.
 * @param options the readiness check and the metrics route.
 */
export function registerProbes(app: FastifyInstance, options: ProbeOptions): void {
  // The probes are not rate limited (a load balancer polls from one
  // address), so a flood of them must not become a flood of queries: one
  // check at a time, its result shared for a second.
  const readiness = sharedFor(1000, options.readiness);
  app.get('/healthz', { config: { auth: 'none', rateLimit: false }, schema: { hide: true } }, () =>
    Promise.resolve({ status: 'ok' }),
  );
  app.get(
    '/readyz',
    { config: { auth: 'none', rateLimit: false }, schema: { hide: true } },
    async (req, reply) => {
      try {
        await readiness();
        return { status: 'ready' };
      } catch (err) {
        req.log.warn({ err }, 'not ready');
        return writeProblem(
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
      { config: { auth: 'none' }, schema: { hide: true } },
      async (_req, reply) => {
        const { contentType, body } = await metricsRoute.exposition();
        return reply.header('cache-control', 'no-store').type(contentType).send(body);
      },
    );
  }
}
