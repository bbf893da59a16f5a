/**
 * The composition root: wires kernel ports to their adapters, registers the
 * modules' routes and tasks, and hands back what each role runs. Built
 * without listening or polling, so tests use it as it is.
 */
import type { Config } from '../../platform/config/index.js';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { createHttpServer, type HttpServer } from '../../platform/http/server.js';
import type { Logger } from '../../platform/log/index.js';

/** What {@link buildApp} needs from the outside. */
export interface AppDeps {
  /** The loaded configuration. */
  readonly config: Config;
  /** URL as the application role. */
  readonly appUrl: string;
  /** The process logger. */
  readonly logger: Logger;
}

/** The assembled application. */
export interface App {
  /** The HTTP server with every route registered, not listening. */
  readonly http: HttpServer;
  /** The application role's pool. */
  readonly sql: Sql;
  /** Closes the HTTP server (draining in-flight requests) and the pool. */
  close(): Promise<void>;
}

/**
 * Assembles the application.
 *
 * @param deps configuration, database URL and logger.
 * @returns the server and its resources; call `close()` when done.
 */
export async function buildApp(deps: AppDeps): Promise<App> {
  const { config } = deps;
  const sql = createSql(deps.appUrl, {
    max: config.database.pool_max,
    applicationName: config.app.name,
  });
  const http = createHttpServer({
    logger: deps.logger,
    bodyLimit: config.http.body_limit,
    readiness: async () => {
      await sql`select 1`;
    },
  });
  await http.ready();
  let closed = false;
  return {
    http,
    sql,
    close: async () => {
      if (closed) return;
      closed = true;
      await http.close();
      await sql.end({ timeout: 5 });
    },
  };
}
