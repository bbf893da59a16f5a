/**
 * Schema migrations with graphile-migrate, run by the owner role. Committed
 * migrations live in `migrations/committed` and carry a hash chain; the
 * application role's name reaches them through the `:APP_ROLE` placeholder so
 * that grants name the right role on every server.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { Logger, migrate } from 'graphile-migrate';

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * The repository root: the nearest folder above this file holding both
 * package.json and migrations/, whether running from source or from dist/.
 *
 * @returns an absolute path.
 * @throws Error when no such folder exists (a broken installation).
 */
export function projectRoot(): string {
  let dir = import.meta.dirname;
  for (;;) {
    if (existsSync(path.join(dir, 'package.json')) && existsSync(path.join(dir, 'migrations'))) {
      return dir;
    }
    const parent = path.dirname(dir);
    if (parent === dir)
      throw new Error('cannot find the project root (package.json and migrations/)');
    dir = parent;
  }
}

/** The folder graphile-migrate reads. */
export function migrationsFolder(): string {
  return path.join(projectRoot(), 'migrations');
}

/** Options of {@link runMigrations}. */
export interface MigrateOptions {
  /** Connection URL of the role that owns the database. */
  readonly ownerUrl: string;
  /** The login role the server connects as; granted what each table needs. */
  readonly appRole: string;
  /** Receives graphile-migrate's progress lines; silent by default. */
  readonly log?: (message: string) => void;
}

/**
 * Applies every committed migration not yet applied. A re-run is a no-op; a
 * committed file whose hash does not match stops with graphile-migrate's
 * error and applies nothing further.
 *
 * @param options owner URL and application role.
 * @throws Error when the role name is not a plain identifier or a migration fails.
 */
export async function runMigrations(options: MigrateOptions): Promise<void> {
  if (!IDENTIFIER.test(options.appRole)) {
    throw new Error(`application role "${options.appRole}" must match ${IDENTIFIER.source}`);
  }
  const log = options.log;
  const logger = new Logger(() => (_level, message) => {
    log?.(message);
  });
  await migrate({
    connectionString: options.ownerUrl,
    migrationsFolder: migrationsFolder(),
    placeholders: { ':APP_ROLE': options.appRole },
    logger,
  });
}
