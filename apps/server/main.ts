/**
 * The server's entry point: `node dist/apps/server/main.js [serve] --role
 * api|worker|all [--config FILE] [--migrate]` or `... migrate`. Loads the
 * configuration, reaches the database (starting the embedded PostgreSQL 18
 * when `database.url` is empty), optionally migrates, starts the role and
 * shuts down cleanly on SIGTERM and SIGINT.
 */
// First: an unsupported Node.js stops here, before anything else is loaded.
import './check-node.js';
import { ConfigError, loadConfigFromProcess, type Config } from '../../platform/config/index.js';
import { createLogger, type Logger } from '../../platform/log/index.js';
import { installWorkerSchema } from '../../platform/jobs/index.js';
import { runMigrations } from '../../platform/migrate/index.js';
import { assertServerVersion, createSql } from '../../platform/pg/client.js';
import { PgDatabase, PgUnitOfWork, unitOfWorkSettings } from '../../platform/pg/uow.js';
import { systemClock } from '../../kernel/clock/index.js';
import { createPrincipalWithToken } from '../../modules/identity/index.js';
import { openDatabase, type DatabaseTarget } from '../../platform/pg/database.js';
import { buildApp, type App } from './app.js';
import { firstRunBanner, localPrincipalFile } from './first-run.js';
import { parseCommandLine, USAGE, type Command } from './cli.js';
import { describeFailure, type FailureContext } from './failure.js';

async function migrate(target: DatabaseTarget, logger: Logger): Promise<void> {
  if (target.ownerUrl === undefined) {
    throw new ConfigError([
      {
        key: 'database.owner_url',
        source: 'default',
        message: 'database.owner_url is empty: it is required to migrate when database.url is set',
      },
    ]);
  }
  await runMigrations({
    ownerUrl: target.ownerUrl,
    appRole: target.appRole,
    log: (m) => {
      logger.info(m);
    },
  });
  await installWorkerSchema(target.ownerUrl, target.appRole, { logger });
  // graphile-migrate keeps its pool open briefly after use.
  await new Promise((resolve) => setTimeout(resolve, 300));
  logger.info('migrations applied');
}

async function serve(
  command: Extract<Command, { kind: 'serve' }>,
  config: Config,
  logger: Logger,
): Promise<void> {
  // graphile-worker (roles worker and all) and migrations connect with
  // node-postgres, which takes one host; postgres.js takes a host list.
  const target = await openDatabase(config.database, {
    singleHost: {
      ...(command.role === 'api' ? {} : { url: `the ${command.role} role's job queue` }),
      ...(command.migrate ? { owner_url: 'migrations' } : {}),
    },
  });
  let app: App | undefined;
  let stopping = false;
  const shutdown = async (signal: string): Promise<void> => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down: draining in-flight work');
    try {
      await app?.close();
      await target.close();
      logger.info('stopped');
      process.exit(0);
    } catch (err) {
      logger.error({ err }, 'unclean shutdown');
      process.exit(1);
    }
  };
  process.on('SIGTERM', (s) => void shutdown(s));
  process.on('SIGINT', (s) => void shutdown(s));
  try {
    const probe = createSql(target.appUrl, {
      max: 1,
      applicationName: `${config.app.name}-startup`,
    });
    try {
      await assertServerVersion(probe);
    } finally {
      await probe.end();
    }
    if (command.migrate) await migrate(target, logger);
    // Admin commands may use this embedded server from now on: its roles,
    // database and (with --migrate) schema are in place.
    await target.embedded?.share();
    app = await buildApp({ config, appUrl: target.appUrl, logger });
    if (command.role === 'worker' || command.role === 'all') {
      // The metrics listener binds first: a port already in use stops the
      // worker before it has taken any job.
      if (command.role === 'worker' || config.metrics.listener === 'own')
        await app.serveMetricsListener();
      await app.startJobs();
      logger.info({ role: command.role }, 'jobs started');
    }
    if (command.role === 'api' || command.role === 'all') {
      if (command.role === 'api' && config.metrics.listener === 'own')
        await app.serveMetricsListener();
      const address = await app.http.listen({ host: config.http.host, port: config.http.port });
      logger.info({ address, role: command.role }, 'listening');
      if (target.embedded !== undefined) {
        // Only the local embedded database gets a principal made for it: an
        // operator's own database is never written to unasked. The banner is
        // for a person: it goes to standard error, standard output being the
        // JSON log stream (docs/DECISIONS.md, "the first-run banner").
        process.stderr.write(
          await firstRunBanner({
            identity: app.identity,
            clock: systemClock,
            file: localPrincipalFile(config.database.embedded_data_dir),
            appName: config.app.name,
            role: command.role,
            address,
          }),
        );
      }
    } else {
      logger.info({ role: command.role }, 'started');
    }
  } catch (err) {
    const report = describeFailure(err, failureContext(config));
    // An expected condition is logged by its one line; a bug with its stack.
    if (report.expected) logger.fatal({ reason: report.text.trim() }, 'start-up failed');
    else logger.fatal({ err }, 'start-up failed');
    await app?.close().catch(() => undefined);
    await target.close().catch(() => undefined);
    throw err;
  }
}

function failureContext(config: Config | undefined): FailureContext {
  return {
    databaseUrl:
      config === undefined || config.database.url === '' ? undefined : config.database.url,
    httpPort: config?.http.port,
    metricsPort: config?.metrics.port,
  };
}

async function createPrincipal(
  command: Extract<Command, { kind: 'principal-create' }>,
  config: Config,
): Promise<void> {
  // A running `make run` holds the embedded server: use it rather than refuse.
  const target = await openDatabase(config.database, { shareRunning: true });
  const sql = createSql(target.appUrl, { max: 2, applicationName: `${config.app.name}-cli` });
  try {
    const db = new PgDatabase(sql);
    const uow = new PgUnitOfWork(db, unitOfWorkSettings(config.database));
    const created = await createPrincipalWithToken(
      { db, uow, clock: systemClock },
      { displayName: command.name, kind: command.principalKind },
    );
    process.stdout.write(
      `principal ${created.principalId} (${command.principalKind}) created\n` +
        `token (shown once, keep it secret): ${created.token}\n`,
    );
  } finally {
    await sql.end({ timeout: 5 });
    await target.close();
  }
}

async function main(argv: readonly string[]): Promise<void> {
  const command = parseCommandLine(argv);
  if (command.kind === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  config = loadConfigFromProcess(command.configPath);
  const logger = createLogger({ appName: config.app.name, level: config.log.level });
  // Backstops: a rejection nobody handled is a bug to log, not a reason to
  // drop every in-flight request; an uncaught exception leaves the process in
  // an unknown state, so it is logged and the process exits for its
  // supervisor to restart it (the database stays consistent: an uncommitted
  // transaction simply rolls back).
  process.on('unhandledRejection', (reason) => {
    logger.error({ err: reason }, 'unhandled promise rejection');
  });
  process.on('uncaughtException', (err) => {
    logger.fatal({ err }, 'uncaught exception: exiting');
    process.exit(1);
  });
  if (command.kind === 'migrate') {
    const target = await openDatabase(config.database, {
      shareRunning: true,
      singleHost: { owner_url: 'migrations' },
    });
    try {
      await migrate(target, logger);
    } finally {
      await target.close();
    }
    return;
  }
  if (command.kind === 'principal-create') {
    await createPrincipal(command, config);
    return;
  }
  await serve(command, config, logger);
}

/** The configuration once loaded: failures after that name its keys. */
let config: Config | undefined;

main(process.argv.slice(2)).catch((err: unknown) => {
  const report = describeFailure(err, failureContext(config));
  process.stderr.write(report.text);
  process.exit(report.exitCode);
});
