/**
 * postgres.js clients: one pool per role, with the settings every connection
 * of this application needs, and the server version check.
 */
import postgres from 'postgres';
import { poolSockets } from './socket.js';

/** The postgres.js client type every adapter is typed against. */
export type Sql = postgres.Sql;

/**
 * What adapters query with: the pool or a transaction. Tagged templates,
 * identifiers (`sql(name)`), `json` and `unsafe` are common to both.
 */
export type ISql = postgres.ISql;

/**
 * The client of a unit of work's transaction (platform/pg/transaction.ts):
 * statements only; it cannot begin, reserve, end or nest.
 */
export type TransactionSql = postgres.ISql;

/** Options of {@link createSql}. */
export interface SqlOptions {
  /** Largest number of pooled connections. */
  readonly max: number;
  /** Shown in pg_stat_activity, so an operator can tell our pools apart. */
  readonly applicationName: string;
  /** Called with each PostgreSQL notice; by default notices are dropped. */
  readonly onnotice?: (notice: postgres.Notice) => void;
  /**
   * Longest opening a connection may take (`database.connect_timeout`), in
   * milliseconds; postgres.js's own default is 30 s.
   */
  readonly connectTimeoutMs?: number;
  /**
   * The session's own defaults, sent as startup options of every
   * connection: PostgreSQL then ends a session the process abandoned
   * (frozen, or its socket lost on one side only) by itself, whatever state
   * the process is in, not only when a transaction's first statement set
   * the timeouts (docs/adr/0003-own-transactions.md).
   */
  readonly session?: SessionTimeouts;
  /**
   * Makes each connection's socket, already connecting to the host and
   * port {@link poolSockets} chose, in place of its own (its error is still
   * held back to its close). For tests that reset a connection at a chosen
   * moment (test/harness/reset-window.ts).
   */
  readonly socket?: (host: string, port: number) => import('node:net').Socket;
}

/** Timeouts every session starts with, in milliseconds (0 disables one). */
export interface SessionTimeouts {
  readonly lockTimeoutMs: number;
  readonly statementTimeoutMs: number;
  readonly transactionTimeoutMs: number;
}

/**
 * The startup options that give a session its timeouts: the three of the
 * unit of work, and `idle_in_transaction_session_timeout` equal to the
 * transaction's (a transaction left idle by a process that went away ends
 * no later than a busy one would).
 *
 * @param session the timeouts.
 * @returns startup options for postgres.js's `connection`.
 */
export function sessionOptions(session: SessionTimeouts): Record<string, string> {
  const ms = (n: number): string => `${String(n)}ms`;
  return {
    lock_timeout: ms(session.lockTimeoutMs),
    statement_timeout: ms(session.statementTimeoutMs),
    transaction_timeout: ms(session.transactionTimeoutMs),
    idle_in_transaction_session_timeout: ms(session.transactionTimeoutMs),
  };
}

/**
 * Seconds postgres.js waits before opening a connection again after the
 * previous one failed: jittered, doubling from 25 to 50 ms and capped at one
 * second. The driver's own default grows to 20 s, and postgres.js 3.4.9 does
 * not always reset its count once the server is back (porsager/postgres#1223),
 * so requests would wait that long after a restart or failover.
 *
 * @param attempt failed attempts so far (0 for the first retry).
 * @returns the delay, in seconds.
 */
export function reconnectBackoff(attempt: number): number {
  return (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** attempt, 1);
}

/** The lowest PostgreSQL major version the application runs on (transaction_timeout). */
export const MIN_SERVER_VERSION = 17;

/**
 * Creates a postgres.js pool for a connection URL.
 *
 * Statements are prepared (postgres.js default); custom plans are forced so a
 * generic plan cached while a table was nearly empty cannot make one
 * connection slow later (see docs/DECISIONS.md).
 *
 * @param url a postgres:// connection URL.
 * @param options pool size and name.
 * @returns the pool; end it with `sql.end()`.
 */
export function createSql(url: string, options: SqlOptions): Sql {
  const listeners = new Set<() => void>();
  // Set by the pool's end: a socket whose paced wait ends after it is not made.
  let ended = false;
  const sql = postgres(url, {
    onclose: () => {
      for (const listener of listeners) listener();
    },
    max: options.max,
    onnotice: options.onnotice ?? (() => undefined),
    backoff: reconnectBackoff,
    ...(options.connectTimeoutMs === undefined
      ? {}
      : { connect_timeout: options.connectTimeoutMs / 1000 }),
    connection: {
      application_name: options.applicationName,
      plan_cache_mode: 'force_custom_plan',
      ...(options.session === undefined ? {} : sessionOptions(options.session)),
    },
    // postgres.js 3.4.9 judges `read-write` by default_transaction_read_only
    // alone, which a hot standby reports off, so a host list whose first
    // node is a standby (an old primary rebuilt as one) would get every
    // connection there. `primary` asks pg_is_in_recovery's reported twin,
    // in_hot_standby, as libpq does for read-write (docs/DECISIONS.md,
    // "read-write means the primary").
    ...(asksReadWrite(url) ? { target_session_attrs: 'primary' as const } : {}),
    // Our timestamps are passed in from the kernel clock as Date values;
    // bigint counts come back as strings and are converted where read.
    types: {},
    // A socket's error reaches the driver with its close, so no statement
    // is routed to a connection between the two; the factory picks the
    // host of a host list, and paces the tries once every host failed
    // (platform/pg/socket.ts).
    ...{
      socket: poolSockets({
        ...(options.socket === undefined ? {} : { make: options.socket }),
        backoffMs: (attempt) => reconnectBackoff(attempt) * 1000,
        ended: () => ended,
      }),
    },
  });
  const end = sql.end.bind(sql);
  sql.end = (endOptions) => {
    ended = true;
    return end(endOptions);
  };
  closeListeners.set(sql, listeners);
  if (options.session !== undefined) sessionDefaults.set(sql, options.session);
  return sql;
}

/**
 * Whether a connection URL asks for `target_session_attrs=read-write`, read
 * as postgres.js 3.4.9 reads it: the URL with the first host of its list in
 * place of the list, parsed by the WHATWG URL parser, so what follows a `#`
 * is no query. (The driver falls back to the environment's
 * PGTARGETSESSIONATTRS when the URL names none; this does not, since only
 * platform/config reads the environment: docs/DECISIONS.md, "read-write
 * means the primary".)
 *
 * @param url a postgres:// URL.
 * @returns true when its query names read-write.
 */
export function asksReadWrite(url: string): boolean {
  try {
    const authority = url.slice(url.indexOf('://') + 3).split(/[?/]/)[0] ?? '';
    const list = decodeURIComponent(authority.slice(authority.indexOf('@') + 1));
    const first = new URL(url.replace(list, list.split(',')[0] ?? ''));
    return first.searchParams.get('target_session_attrs') === 'read-write';
  } catch {
    // The driver refuses such a URL itself, with its own error.
    return false;
  }
}

const sessionDefaults = new WeakMap<Sql, SessionTimeouts>();

/**
 * The timeouts every session of a pool made by {@link createSql} starts
 * with (its `session` option): a unit of work whose own timeouts are the
 * same need not send them with each BEGIN.
 *
 * @param sql the pool.
 * @returns the timeouts, or undefined when the pool was made without them
 *   (or not by {@link createSql}).
 */
export function sessionTimeoutsOf(sql: Sql): SessionTimeouts | undefined {
  return sessionDefaults.get(sql);
}

const closeListeners = new WeakMap<Sql, Set<() => void>>();

/**
 * Subscribes to the closing of any connection of a pool made by
 * {@link createSql} (the unit of work asks again for a connection it was
 * waiting for then: see platform/pg/transaction.ts).
 *
 * @param sql the pool.
 * @param listener called, synchronously, each time one of its connections closes.
 * @returns a function that unsubscribes, or undefined for a pool that
 *   {@link createSql} did not make.
 */
export function onConnectionClose(sql: Sql, listener: () => void): (() => void) | undefined {
  const listeners = closeListeners.get(sql);
  if (listeners === undefined) return undefined;
  listeners.add(listener);
  return () => {
    listeners.delete(listener);
  };
}

/**
 * Reads the server's major version and refuses one older than
 * {@link MIN_SERVER_VERSION}.
 *
 * @param sql a pool or connection.
 * @returns the major version.
 * @throws Error naming the found and required versions.
 */
export async function assertServerVersion(sql: Sql): Promise<number> {
  const [row] = await sql<{ v: string }[]>`select current_setting('server_version_num') as v`;
  const major = Math.floor(Number(row?.v) / 10000);
  if (!(major >= MIN_SERVER_VERSION)) throw new ServerVersionError(major);
  return major;
}

/** The server is older than {@link MIN_SERVER_VERSION}; the message is one printable line. */
export class ServerVersionError extends Error {
  override readonly name = 'ServerVersionError';

  /** @param major the server's major version. */
  constructor(readonly major: number) {
    super(
      `PostgreSQL ${String(MIN_SERVER_VERSION)} or newer is required (transaction_timeout); the server is version ${String(major)}`,
    );
  }
}
