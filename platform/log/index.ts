/**
 * The process logger: pino JSON lines carrying the service name (`app.name`),
 * shared by the HTTP server (Fastify uses it for request lines, with the
 * correlation id) and the worker.
 */
import { pino, type DestinationStream, type Logger } from 'pino';

/** The logger type used across the application. */
export type { Logger } from 'pino';

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** Service name on every line. */
  readonly appName: string;
  /** pino level name or `silent`. */
  readonly level: string;
  /** Destination (tests); standard output by default. */
  readonly stream?: DestinationStream;
}

/**
 * Creates the process logger.
 *
 * @param options name, level and destination.
 * @returns a pino logger.
 */
export function createLogger(options: LoggerOptions): Logger {
  const settings = { level: options.level, base: { service: options.appName } };
  return options.stream === undefined ? pino(settings) : pino(settings, options.stream);
}
