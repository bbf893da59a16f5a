/**
 * The composition root: wires kernel ports to their adapters, registers the
 * modules' routes, tasks and cron items, and hands back what each process
 * role runs. Built without listening or polling, so tests use it as it is.
 */
import { performance } from 'node:perf_hooks';
import { systemClock, type Clock } from '../../kernel/clock/index.js';
import { InMemoryMetrics, type Metrics } from '../../kernel/metrics/index.js';
import type { Config } from '../../platform/config/index.js';
import { applyConnectionLimits } from '../../platform/http/limits.js';
import { createHttpServer, type HttpServer } from '../../platform/http/server.js';
import { startTracing } from '../../platform/tracing/index.js';
import { startWorker, type WorkerHandle } from '../../platform/jobs/index.js';
import type { Logger } from '../../platform/log/index.js';
import {
  fanOutMetrics,
  PrometheusMetrics,
  startMetricsListener,
  type MetricsListener,
} from '../../platform/metrics/index.js';
import type { ModuleDescriptor } from '../../platform/module/index.js';
import { createSql, type Sql } from '../../platform/pg/client.js';
import {
  PgDatabase,
  PgUnitOfWork,
  STALL_GRACE_MS,
  unitOfWorkSettings,
  type FaultContext,
} from '../../platform/pg/uow.js';
import {
  createIdentityModule,
  startCredentialListener,
  type IdentityModule,
} from '../../modules/identity/index.js';
import { createLedgerModule } from '../../modules/ledger/index.js';
import { createSyncModule, type SyncModule } from '../../modules/sync/index.js';

/**
 * Reuses a read's result for a minimum interval, so scrapes (public on the
 * API listener, not rate limited on the listener of its own) cannot make the
 * database work on every request.
 *
 * @param minIntervalMs how long a result stays fresh; 0 reads every time.
 * @param read the read.
 * @returns a function with the read's result, fresh or cached.
 */
export function cachedFor<T>(minIntervalMs: number, read: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: T } | undefined;
  return async () => {
    const now = performance.now();
    if (last !== undefined && now - last.at < minIntervalMs) return last.value;
    const value = await read();
    last = { at: performance.now(), value };
    return value;
  };
}

/** The API document's version. */
export const API_VERSION = '1.0.0';

/**
 * How long a scrape waits for the statistics of `idempotency_keys`, which is
 * also the statement timeout of their query: well inside a scraper's usual
 * timeout (10s), so a slow database costs a NaN gauge, not a failed scrape.
 */
export const KEY_STATS_TIMEOUT_MS = 1_000;

/** Jobs the worker runs at once. */
const WORKER_CONCURRENCY = 2;
/** The worker's pool: a connection per job, one that listens, one for cron. */
const WORKER_POOL_MAX = WORKER_CONCURRENCY + 2;

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
  /**
   * Where metrics go besides the Prometheus exporter (`metrics.enabled`),
   * e.g. the in-memory metrics a test reads back. With the exporter disabled
   * and none given, metrics are kept in memory.
   */
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
  /** The Prometheus exporter (what `metrics.path` serves); undefined when `metrics.enabled` is false. */
  readonly prometheus: PrometheusMetrics | undefined;
  /**
   * Starts the metrics listener of its own on `http.host` and
   * `metrics.port`, serving the exporter at `metrics.path`, and logs its
   * address: for role worker, and for roles api and all when
   * `metrics.listener` is `own` (else they serve metrics on the HTTP
   * listener).
   * Started once; later calls return the same listener. Stopped by `close()`.
   *
   * @returns the listener, or undefined when `metrics.enabled` is false.
   * @throws Error from the socket when the port cannot be bound.
   */
  serveMetricsListener(): Promise<MetricsListener | undefined>;
  /**
   * Starts Graphile Worker with every module's tasks and cron items (roles
   * `worker` and `all`). Stopped by `close()`.
   *
   * @returns the running worker.
   */
  startJobs(): Promise<WorkerHandle>;
  /**
   * Stops the worker (letting in-flight jobs finish), closes the HTTP server
   * (draining), the metrics listener and the pool.
   */
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
  const prometheus = config.metrics.enabled
    ? new PrometheusMetrics({ processMetrics: config.metrics.process_metrics })
    : undefined;
  const sinks = [deps.metrics, prometheus].filter((sink) => sink !== undefined);
  const metrics = sinks.length === 0 ? new InMemoryMetrics() : fanOutMetrics(sinks);
  const pools = metrics.gauge(
    'db_pool_max_connections',
    'Most connections a database pool of this process may open, by pool.',
    ['pool'],
  );
  pools.set({ pool: 'app' }, config.database.pool_max);
  const sql = createSql(deps.appUrl, {
    max: config.database.pool_max,
    applicationName: config.app.name,
    connectTimeoutMs: config.database.connect_timeout,
    session: unitOfWorkSettings(config.database),
  });
  const db = new PgDatabase(sql, {
    traceStatements: config.tracing.enabled,
    statementDeadlineMs:
      config.database.statement_timeout === 0
        ? 0
        : config.database.statement_timeout + config.database.connect_timeout + STALL_GRACE_MS,
  });
  // Until the database confirms the sessions' timeouts, every BEGIN sends
  // them; a database down at start leaves them unconfirmed (the safe side).
  void db.confirmSessionTimeouts();
  const uow = new PgUnitOfWork(db, {
    ...unitOfWorkSettings(config.database),
    ...(deps.faultHook === undefined ? {} : { faultHook: deps.faultHook }),
    onRetry: ({ attempt, code, name }) => {
      deps.logger.debug({ attempt, code, unit: name }, 'unit of work retried');
    },
  });
  let closed = false;
  const identity = createIdentityModule({
    db,
    uow,
    clock,
    tokenCache: {
      ttlMs: config.identity.token_cache_ttl,
      maxEntries: config.identity.token_cache_size,
    },
  });
  const sync = createSyncModule({
    db,
    clock,
    metrics,
    cleanupBatchSize: config.sync.idempotency_cleanup_batch_size,
    cleanupPacing: config.sync.idempotency_cleanup_pacing,
    cleanupIntervalMs: config.sync.idempotency_cleanup_interval,
    ...(config.sync.idempotency_replay_cache_ttl === 0
      ? {}
      : {
          replayCache: {
            ttlMs: config.sync.idempotency_replay_cache_ttl,
            maxEntries: config.sync.idempotency_replay_cache_size,
          },
        }),
  });
  prometheus?.scrapeGauges({
    gauges: {
      rows: {
        name: 'idempotency_keys_rows',
        help: "Rows in idempotency_keys: the planner's estimate, exact while the table has no statistics.",
      },
      oldestExpiredAgeSeconds: {
        name: 'idempotency_keys_oldest_expired_age_seconds',
        help: 'Seconds since the oldest row still in idempotency_keys expired; 0 when none is expired.',
      },
    },
    read: cachedFor(config.metrics.key_stats_min_interval, () =>
      sync.keyStats(KEY_STATS_TIMEOUT_MS),
    ),
    timeoutMs: KEY_STATS_TIMEOUT_MS,
    onError: (err) => {
      deps.logger.warn({ err }, 'metrics: reading idempotency key statistics failed');
    },
  });
  const ledger = createLedgerModule({ db, uow, clock });
  const modules: ModuleDescriptor[] = [
    identity.descriptor,
    sync.descriptor,
    ledger.descriptor,
    ...(deps.extraModules?.({ db, uow, clock }) ?? []),
  ];
  const tracing = startTracing(
    {
      enabled: config.tracing.enabled,
      endpoint: config.tracing.endpoint,
      samplingRatio: config.tracing.sampling_ratio,
      serviceName: config.app.name,
      ignorePaths: ['/healthz', '/readyz', config.metrics.path],
    },
    deps.logger,
  );
  const http = await createHttpServer({
    ...(tracing.instrument === undefined ? {} : { instrument: tracing.instrument }),
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
    maxPipelinedRequests: config.http.max_pipelined_requests,
    metrics,
    idempotency: {
      store: sync.store,
      uow,
      ttlMs: config.sync.idempotency_key_ttl,
      waitMs: config.database.lock_timeout,
    },
    ...(prometheus === undefined || config.metrics.listener === 'own'
      ? {}
      : { metricsRoute: { path: config.metrics.path, exposition: () => prometheus.exposition() } }),
  });
  applyConnectionLimits(http.server, {
    requestTimeoutMs: config.http.request_timeout,
    headersTimeoutMs: config.http.headers_timeout,
    keepAliveTimeoutMs: config.http.keep_alive_timeout,
    maxConnections: config.http.max_connections,
    socketTimeoutMs: config.http.socket_timeout,
  });
  for (const m of modules) await m.routes?.(http);
  await http.ready();
  let worker: WorkerHandle | undefined;
  let listening: Promise<MetricsListener | undefined> | undefined;
  // The token cache serves only while this listener hears every credential
  // change; without a TTL there is no cache and no listener. Started last,
  // once nothing else can fail, so a failed build leaves no listener behind.
  const credentials =
    config.identity.token_cache_ttl === 0
      ? undefined
      : await startCredentialListener(deps.appUrl, identity.credentialFeed, {
          applicationName: `${config.app.name}-credentials`,
          onLost: () => {
            if (!closed)
              deps.logger.warn('token cache off: the credential listener lost its session');
          },
          onError: (err) => {
            deps.logger.warn({ err }, 'token cache: listening for credential changes failed');
          },
        });
  return {
    http,
    sql,
    db,
    uow,
    identity,
    sync,
    modules,
    prometheus,
    serveMetricsListener: () => {
      listening ??= (async () => {
        if (prometheus === undefined) return undefined;
        const listener = await startMetricsListener({
          host: config.http.host,
          port: config.metrics.port,
          path: config.metrics.path,
          exposition: () => prometheus.exposition(),
          onError: (err) => {
            deps.logger.error({ err }, 'metrics: scrape failed');
          },
        });
        deps.logger.info(
          { address: listener.address, path: config.metrics.path },
          'metrics listening',
        );
        return listener;
      })();
      return listening;
    },
    startJobs: async () => {
      worker ??= await startWorker({
        connectionString: deps.appUrl,
        tasks: modules.flatMap((m) => m.tasks ?? []),
        cron: modules.flatMap((m) => m.cron ?? []),
        concurrency: WORKER_CONCURRENCY,
        maxPoolSize: WORKER_POOL_MAX,
        logger: deps.logger,
        pollInterval: 2000,
        metrics,
        applicationName: `${config.app.name}-worker`,
      });
      pools.set({ pool: 'worker' }, WORKER_POOL_MAX);
      return worker;
    },
    close: async () => {
      if (closed) return;
      closed = true;
      await worker?.stop();
      // close() stops Node.js's request timeouts and waits for every open
      // request: a client that stalls its body would hold the shutdown
      // forever. After one request timeout, what is still open is cut.
      const drain = setTimeout(() => {
        http.server.closeAllConnections();
      }, config.http.request_timeout);
      drain.unref();
      try {
        await http.close();
      } finally {
        clearTimeout(drain);
      }
      // A listener that never bound has nothing to close.
      await listening?.then(
        (listener) => listener?.close(),
        () => undefined,
      );
      await credentials?.close();
      await db.close({ timeout: 5 });
      // Last: the spans of the requests drained above are sent too.
      await tracing.shutdown();
    },
  };
}
