/**
 * How the command line reports a failure: an expected condition (a bad
 * flag or configuration value, a database that cannot be reached or is not
 * migrated, an embedded folder held by another server, a port in use) is one
 * line that says what to do, with no stack trace; anything else is a bug and
 * keeps its stack.
 */
import { ConfigError } from '../../platform/config/index.js';
import { EmbeddedInUseError, EmbeddedStartError } from '../../platform/pg/embedded.js';
import { ServerVersionError } from '../../platform/pg/client.js';
import { parsePostgresUrl } from '../../platform/pg/database.js';
import { UsageError } from './cli.js';

/** Exit status for a command line or configuration the server cannot use. */
export const EXIT_USAGE = 2;

/** Exit status for any other failure. */
export const EXIT_FAILURE = 1;

/** What the process prints and exits with for a failure. */
export interface FailureReport {
  /** The text for standard error, ending with a newline. */
  readonly text: string;
  /** The exit status. */
  readonly exitCode: number;
  /** Whether the failure was expected (reported without a stack). */
  readonly expected: boolean;
}

/** Where the command was connecting to, for naming the key in a message. */
export interface FailureContext {
  /** `database.url` when set, else undefined (the embedded server). */
  readonly databaseUrl: string | undefined;
  /** `http.port`, when the command listens. */
  readonly httpPort: number | undefined;
  /** `metrics.port`, when the command serves metrics on a listener of its own. */
  readonly metricsPort?: number | undefined;
}

interface ErrorLike {
  readonly code?: unknown;
  readonly message?: unknown;
  readonly address?: unknown;
  readonly port?: unknown;
}

const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ETIMEDOUT',
  'CONNECT_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
]);

function databaseName(context: FailureContext): string {
  if (context.databaseUrl === undefined) return 'the embedded PostgreSQL';
  try {
    return `PostgreSQL at ${parsePostgresUrl('database.url', context.databaseUrl).hosts.join(',')}`;
  } catch {
    return 'PostgreSQL (database.url)';
  }
}

/**
 * The one line for an expected condition, or undefined for anything else.
 *
 * @param err what was thrown.
 * @param context the configured database and port.
 * @returns the line (without newline) and whether it is a usage error.
 */
function expectedLine(
  err: unknown,
  context: FailureContext,
): { line: string; usage: boolean } | undefined {
  if (err instanceof UsageError || err instanceof ConfigError) {
    return { line: err.message, usage: true };
  }
  if (
    err instanceof EmbeddedInUseError ||
    err instanceof EmbeddedStartError ||
    err instanceof ServerVersionError
  ) {
    return { line: err.message, usage: false };
  }
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as ErrorLike;
  const code = typeof e.code === 'string' ? e.code : undefined;
  const message = typeof e.message === 'string' ? e.message.split('\n')[0] : '';
  if (code !== undefined && CONNECTION_CODES.has(code)) {
    const key = context.databaseUrl === undefined ? '' : ' (database.url)';
    return {
      line: `cannot reach ${databaseName(context)}${key}: ${message || code}`,
      usage: false,
    };
  }
  switch (code) {
    case '28P01':
    case '28000':
      return {
        line: `${databaseName(context)} refused the credentials${context.databaseUrl === undefined ? '' : ' (database.url or database.owner_url)'}: ${message}`,
        usage: false,
      };
    case '57P01':
    case '57P02':
    case '57P03':
      return {
        line: `${databaseName(context)} is shutting down or starting up (${message}): try again in a moment`,
        usage: false,
      };
    case '3D000':
      return {
        line: `${databaseName(context)}${context.databaseUrl === undefined ? '' : ' (database.url)'}: ${message}`,
        usage: false,
      };
    case '42P01':
    case '3F000':
      return {
        line: `the database has no schema yet (${message}): run "migrate" first (make migrate)`,
        usage: false,
      };
    case 'EADDRINUSE': {
      // The error names the port it could not bind: say which key that is.
      const key =
        e.port === undefined
          ? undefined
          : e.port === context.httpPort
            ? 'http.port'
            : e.port === context.metricsPort
              ? 'metrics.port'
              : undefined;
      return {
        line:
          key === undefined
            ? `an address is in use: ${message}`
            : `${key} ${String(e.port)} is in use by another process: stop it, or set ${key.toUpperCase().replace('.', '__')}`,
        usage: false,
      };
    }
    default:
      return undefined;
  }
}

/**
 * Describes a failure for standard error.
 *
 * @param err what was thrown.
 * @param context the configured database and port, for naming keys.
 * @returns the text, the exit status and whether the condition was expected.
 */
export function describeFailure(err: unknown, context: FailureContext): FailureReport {
  const expected = expectedLine(err, context);
  if (expected !== undefined) {
    return {
      text: `${expected.line}\n`,
      exitCode: expected.usage ? EXIT_USAGE : EXIT_FAILURE,
      expected: true,
    };
  }
  const text = err instanceof Error ? (err.stack ?? String(err)) : String(err);
  return { text: `${text}\n`, exitCode: EXIT_FAILURE, expected: false };
}
