/**
 * The composition root: wires kernel ports to their adapters, registers the
 * modules' routes, tasks and cron items, and hands back what each process
 * role runs. Built without listening or polling, so tests use it as it is.
 */
import { systemClock, type Clock } from '../../kernel/clock/index.js';
import { InMemoryMetrics, type Metrics } from '../../kernel/metrics/index.js';
import type { Config } from '../../platform/config/index.js';
import { createHttpServer, type HttpServer } from '../../platform/http/server.js';
import { startWorker, type WorkerHandle } from '../../platform/jobs/index.js';
import type { Logger } from '../../platform/log/index.js';
import type { ModuleDescriptor } from '../../platform/module/index.js';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { PgDatabase, PgUnitOfWork, type FaultContext } from '../../platform/pg/uow.js';
import { createIdentityModule, type IdentityModule } from '../../modules/identity/index.js';
import { createLedgerModule } from '../../modules/ledger/index.js';
import { createSyncModule, type SyncModule } from '../../modules/sync/index.js';

/** The API document's version. */
export const API_VERSION = '1.0.0';

/** What {@link buildApp} needs from the outside. */
export interface AppDeps {
  /** The loaded configuration. */
  readonly config: Config;
  /** URL as the application role. */
  readonly appUrl: string;
  /** The process logger. */
  readonly logger: Logger;
  /** The kernel clock; the system clock by default (tests pass a manual one). */
  readonly clock?: Clock;
  /** Where metrics go; in memory by default. */
  readonly metrics?: Metrics;
  /** Test only: makes PostgreSQL fail a chosen attempt of a unit of work. */
  readonly faultHook?: (ctx: FaultContext) => string | undefined;
  /**
   * Further modules to register after the built-in ones (tests register
   * modules of their own; each gets the same database and unit of work).
   */
  readonly extraModules?: (ports: {
    db: PgDatabase;
    uow: PgUnitOfWork;
    clock: Clock;
  }) => readonly ModuleDescriptor[];
}

/** The assembled application. */
export interface App {
  /** The HTTP server with every route registered, not listening. */
  readonly http: HttpServer;
  /** The application role's pool. */
  readonly sql: Sql;
  /** Ambient-transaction access for adapters. */
  readonly db: PgDatabase;
  /** The unit of work. */
  readonly uow: PgUnitOfWork;
  /** The identity module (principals, tokens). */
  readonly identity: IdentityModule;
  /** The sync module (idempotency store, cleanup). */
  readonly sync: SyncModule;
  /** Every module, for the worker's tasks and cron items. */
  readonly modules: readonly ModuleDescriptor[];
  /**
   * Starts Graphile Worker with every module's tasks and cron items (roles
   * `worker` and `all`). Stopped by `close()`.
   *
   * @returns the running worker.
   */
  startJobs(): Promise<WorkerHandle>;
  /** Stops the worker (letting in-flight jobs finish), closes the HTTP server (draining) and the pool. */
  close(): Promise<void>;
}

/**
 * Assembles the application.
 *
 * @param deps configuration, database URL, logger and test hooks.
 * @returns the server and its resources; call `close()` when done.
 */
export async function buildApp(deps: AppDeps): Promise<App> {
  const { config } = deps;
  const clock = deps.clock ?? systemClock;
  const metrics = deps.metrics ?? new InMemoryMetrics();
  const sql = createSql(deps.appUrl, {
    max: config.database.pool_max,
    applicationName: config.app.name,
  });
  const db = new PgDatabase(sql);
  const uow = new PgUnitOfWork(db, {
    lockTimeoutMs: config.database.lock_timeout,
    statementTimeoutMs: config.database.statement_timeout,
    transactionTimeoutMs: config.database.transaction_timeout,
    retryMax: config.database.tx_retry_max,
    ...(deps.faultHook === undefined ? {} : { faultHook: deps.faultHook }),
    onRetry: ({ attempt, code, name }) => {
      deps.logger.debug({ attempt, code, unit: name }, 'unit of work retried');
    },
  });
  const identity = createIdentityModule({ db, uow, clock });
  const sync = createSyncModule({
    db,
    clock,
    metrics,
    cleanupBatchSize: config.sync.idempotency_cleanup_batch_size,
    cleanupIntervalMs: config.sync.idempotency_cleanup_interval,
  });
  const ledger = createLedgerModule({ db, uow, clock });
  const modules: ModuleDescriptor[] = [
    identity.descriptor,
    sync.descriptor,
    ledger.descriptor,
    ...(deps.extraModules?.({ db, uow, clock }) ?? []),
  ];
  const http = await createHttpServer({
    logger: deps.logger,
    bodyLimit: config.http.body_limit,
    readiness: async () => {
      await sql`select 1`;
    },
    appName: config.app.name,
    apiVersion: API_VERSION,
    authenticator: identity.authenticator,
    clock,
    rateLimit: { max: config.http.rate_limit_max, windowMs: config.http.rate_limit_window },
    metrics,
    idempotency: {
      store: sync.store,
      uow,
      ttlMs: config.sync.idempotency_key_ttl,
      waitMs: config.database.lock_timeout,
    },
  });
  for (const m of modules) await m.routes?.(http);
  await http.ready();
  let worker: WorkerHandle | undefined;
  let closed = false;
  return {
    http,
    sql,
    db,
    uow,
    identity,
    sync,
    modules,
    startJobs: async () => {
      worker ??= await startWorker({
        connectionString: deps.appUrl,
        tasks: modules.flatMap((m) => m.tasks ?? []),
        cron: modules.flatMap((m) => m.cron ?? []),
        concurrency: 2,
        logger: deps.logger,
        pollInterval: 2000,
        metrics,
        applicationName: `${config.app.name}-worker`,
      });
      return worker;
    },
    close: async () => {
      if (closed) return;
      closed = true;
      await worker?.stop();
      await http.close();
      await sql.end({ timeout: 5 });
    },
  };
}
