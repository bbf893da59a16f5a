/**
 * What graphile-worker needs from us besides tasks: a `pg` pool we own (so
 * stopping the worker can wait for its connections to close) and a logger
 * that writes to the process logger.
 */
import { Logger as GraphileLogger } from 'graphile-worker';
import pg from 'pg';
import type { Logger } from '../log/index.js';

/** Options of {@link createWorkerPool}. */
export interface WorkerPoolOptions {
  /** Largest number of connections. */
  readonly max: number;
  /** Shown in pg_stat_activity. */
  readonly applicationName: string;
  /** Where connection errors are logged; dropped when absent. */
  readonly logger?: Logger;
}

/**
 * Creates a `pg` pool for graphile-worker.
 *
 * Error listeners are attached to the pool and to each client: without them
 * an idle connection's error (a server restart) would be an unhandled
 * 'error' event and end the process, and graphile-worker would print a
 * warning on every start.
 *
 * @param connectionString a postgres:// URL.
 * @param options size, name and logger.
 * @returns the pool; end it with `pool.end()`.
 */
export function createWorkerPool(connectionString: string, options: WorkerPoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: options.max,
    application_name: options.applicationName,
  });
  const onError = (err: Error): void => {
    options.logger?.error({ err }, 'worker database connection failed');
  };
  pool.on('error', onError);
  pool.on('connect', (client) => {
    client.on('error', onError);
  });
  return pool;
}

/**
 * Wraps the process logger as graphile-worker's logger. Only the scope (worker,
 * task, job id) and an error are passed on, never the job rows graphile-worker
 * attaches as metadata: payloads may hold data that must not reach the logs.
 *
 * @param logger the process logger; graphile-worker's messages are dropped when absent.
 * @returns a graphile-worker logger.
 */
export function graphileLogger(logger: Logger | undefined): GraphileLogger {
  return new GraphileLogger((scope) => {
    if (logger === undefined) return () => undefined;
    const bound = logger.child({
      component: 'worker',
      ...(scope.label === undefined ? {} : { worker_scope: scope.label }),
      ...(scope.workerId === undefined ? {} : { worker_id: scope.workerId }),
      ...(scope.taskIdentifier === undefined ? {} : { task: scope.taskIdentifier }),
      ...(scope.jobId === undefined ? {} : { job_id: scope.jobId }),
    });
    return (level, message, meta) => {
      const error = meta['error'] ?? meta['fatalError'];
      const fields = error instanceof Error ? { err: error } : {};
      // LogLevel is a const enum of strings; compare as strings so this does
      // not depend on inlining it.
      switch (level as string) {
        case 'error':
          bound.error(fields, message);
          break;
        case 'warning':
          bound.warn(fields, message);
          break;
        case 'info':
          bound.info(fields, message);
          break;
        default:
          bound.debug(fields, message);
      }
    };
  });
}
