/**
 * Commits migrations/current.sql as the next graphile-migrate migration
 * (`make migration-commit`). graphile-migrate needs a shadow database and a
 * root connection to commit; this script starts a throwaway embedded
 * PostgreSQL 18 to provide them, so nothing has to be installed by hand.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { commit, Logger } from 'graphile-migrate';
import { createSql } from '../platform/pg/client.js';
import { EmbeddedPostgres } from '../platform/pg/embedded.js';
import { ensureDatabase, ensureLoginRole } from '../platform/pg/roles.js';
import { migrationsFolder } from '../platform/migrate/index.js';

const message = process.argv[2];
const root = await fs.mkdtemp(path.join(os.tmpdir(), 'migration-commit-'));
const pg = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true });
try {
  const admin = createSql(pg.adminUrl(), { max: 1, applicationName: 'migration-commit' });
  const owner = { name: 'app_owner', password: randomBytes(16).toString('hex') };
  await ensureLoginRole(admin, owner);
  await ensureLoginRole(admin, { name: 'app_user', password: randomBytes(16).toString('hex') });
  await ensureDatabase(admin, 'app', owner.name);
  await ensureDatabase(admin, 'app_shadow', owner.name);
  await admin.end();
  await commit(
    {
      connectionString: pg.urlFor(owner.name, owner.password, 'app'),
      shadowConnectionString: pg.urlFor(owner.name, owner.password, 'app_shadow'),
      rootConnectionString: pg.adminUrl(),
      migrationsFolder: migrationsFolder(),
      placeholders: { ':APP_ROLE': 'app_user' },
      logger: new Logger(() => (_level, text) => {
        console.log(text);
      }),
    },
    message ?? null,
  );
  // graphile-migrate keeps its pool open briefly after use.
  await new Promise((resolve) => setTimeout(resolve, 300));
} finally {
  await pg.stop('immediate');
  await fs.rm(root, { recursive: true, force: true });
}
