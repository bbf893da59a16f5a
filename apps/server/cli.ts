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
  | {
      readonly kind: 'principal-create';
      readonly configPath: string | undefined;
      readonly name: string;
      readonly principalKind: 'user' | 'service';
    }
  | { readonly kind: 'help' };

/** Thrown for a command line the server cannot run; its message includes the usage. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** The usage text printed by `--help` and with every usage error. */
export const USAGE = `Usage:
  server [serve] [--role api|worker|all] [--config FILE] [--migrate]
  server migrate [--config FILE]
  server principal create --name NAME [--kind user|service] [--config FILE]
  server --help

  --role      api: serve HTTP; worker: run background jobs; all: both (default)
  --config    a JSON configuration file (environment variables override it)
  --migrate   apply pending database migrations before starting
  --name      display name of the new principal (1 to 200 characters)
  --kind      user (default) or service`;

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
  const configPath = values.config;
  if (configPath === '') throw new UsageError(`--config needs a file path\n\n${USAGE}`);
  if (command === 'principal') {
    if (rest.length !== 1 || rest[0] !== 'create') {
      throw new UsageError(
        `Expected "principal create", got "principal ${rest.join(' ')}"\n\n${USAGE}`,
      );
    }
    if (values.role !== undefined || values.migrate === true) {
      throw new UsageError(`"principal create" takes --name, --kind and --config\n\n${USAGE}`);
    }
    const name = values.name?.trim() ?? '';
    if (name.length < 1 || name.length > 200) {
      throw new UsageError(`--name must be 1 to 200 characters\n\n${USAGE}`);
    }
    const principalKind = values.kind ?? 'user';
    if (principalKind !== 'user' && principalKind !== 'service') {
      throw new UsageError(`--kind must be user or service, got "${principalKind}"\n\n${USAGE}`);
    }
    return { kind: 'principal-create', configPath, name, principalKind };
  }
  if (rest.length > 0) throw new UsageError(`Unexpected argument "${rest.join(' ')}"\n\n${USAGE}`);
  if (values.name !== undefined || values.kind !== undefined) {
    throw new UsageError(`--name and --kind belong to "principal create"\n\n${USAGE}`);
  }
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
      name: { type: 'string' },
      kind: { type: 'string' },
    },
  });
}
