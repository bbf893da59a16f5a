/**
 * The server's command line: `serve` (the default) with `--role`, `--config`
 * and `--migrate`, and `migrate` to apply migrations and exit. Unknown flags
 * and bad values are refused with the usage text.
 */
import { parseArgs } from 'node:util';

/** Which parts of the server a process runs. */
export type Role = 'api' | 'worker' | 'all';

/** A parsed command line. */
export type Command =
  | {
      readonly kind: 'serve';
      readonly role: Role;
      readonly configPath: string | undefined;
      readonly migrate: boolean;
    }
  | { readonly kind: 'migrate'; readonly configPath: string | undefined }
  | { readonly kind: 'help' };

/** Thrown for a command line the server cannot run; its message includes the usage. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** The usage text printed by `--help` and with every usage error. */
export const USAGE = `Usage:
  server [serve] [--role api|worker|all] [--config FILE] [--migrate]
  server migrate [--config FILE]
  server --help

  --role      api: serve HTTP; worker: run background jobs; all: both (default)
  --config    a JSON configuration file (environment variables override it)
  --migrate   apply pending database migrations before starting`;

const ROLES: readonly Role[] = ['api', 'worker', 'all'];

/**
 * Parses the arguments after the script name.
 *
 * @param argv e.g. `process.argv.slice(2)`.
 * @returns the command to run.
 * @throws UsageError naming the bad flag, value or command.
 */
export function parseCommandLine(argv: readonly string[]): Command {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\n${USAGE}`);
  }
  const { values, positionals } = parsed;
  if (values.help === true) return { kind: 'help' };
  const [command = 'serve', ...rest] = positionals;
  if (rest.length > 0) throw new UsageError(`Unexpected argument "${rest.join(' ')}"\n\n${USAGE}`);
  const configPath = values.config;
  if (configPath === '') throw new UsageError(`--config needs a file path\n\n${USAGE}`);
  if (command === 'migrate') {
    if (values.role !== undefined || values.migrate === true) {
      throw new UsageError(`"migrate" takes only --config\n\n${USAGE}`);
    }
    return { kind: 'migrate', configPath };
  }
  if (command !== 'serve') throw new UsageError(`Unknown command "${command}"\n\n${USAGE}`);
  const role = values.role ?? 'all';
  if (!(ROLES as readonly string[]).includes(role)) {
    throw new UsageError(`--role must be one of ${ROLES.join(', ')}, got "${role}"\n\n${USAGE}`);
  }
  return { kind: 'serve', role: role as Role, configPath, migrate: values.migrate === true };
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: true,
    options: {
      role: { type: 'string' },
      config: { type: 'string' },
      migrate: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}
