/**
 * One transaction on a connection reserved from the pool, driven by hand so
 * that nothing waits for an answer it does not need: BEGIN travels in the
 * same write as the transaction's first statement, and a SAVEPOINT in the
 * same write as the statements after it. postgres.js's own `begin()` and
 * `savepoint()` wait for each before running the callback, one round trip
 * each (docs/adr/0003-own-transactions.md).
 *
 * What this class guarantees, and the unit of work (uow.ts) relies on:
 *
 * - BEGIN is the first statement the connection runs: a reserved connection
 *   is idle and outside any transaction (this class hands a connection back
 *   only after its COMMIT or ROLLBACK was answered), so BEGIN cannot fail
 *   unless the session does, and every statement pipelined behind it runs
 *   inside the transaction;
 * - the connection closing is heard at once (postgres.js calls the
 *   connection's `onclose`, set when BEGIN is handed to it): from then on
 *   no statement is sent (it would go to a dead socket, or to the session
 *   the pool opens next on the same connection object), {@link closed}
 *   rejects, and the connection is never handed back;
 * - no statement is sent once COMMIT or ROLLBACK has been sent;
 * - each scope (the transaction, each savepoint) records the first failure
 *   of a statement sent in it, so a failure its caller caught still fails
 *   the scope, as postgres.js does;
 * - a connection whose state is unknown (a ROLLBACK that failed) is closed,
 *   never handed back.
 */
import type postgres from 'postgres';
import { OverlappingSavepointError } from '../../kernel/txn/index.js';
import { onConnectionClose, type Sql, type TransactionSql } from './client.js';
import { observed } from './observed.js';
import type { StatementSpans } from './statement-spans.js';

/** Where a scope (the transaction or one savepoint) keeps its first failure. */
export interface Scope {
  failed: boolean;
  error: unknown;
  /**
   * Set when a savepoint's run is over (released or rolled back to): a
   * statement of its client sent later would land in the outer transaction,
   * beside an answer that says the savepoint's work was undone.
   */
  ended: boolean;
  /**
   * Set while a savepoint opened from this scope runs: a statement of this
   * scope, or a second savepoint of it, would run inside that savepoint
   * and be rolled back with it.
   */
  savepointOpen: boolean;
  /** The scope the savepoint was opened from; undefined for the transaction's own. */
  readonly parent: Scope | undefined;
}

/**
 * A scope with no failure yet.
 *
 * @param parent the scope a savepoint is opened from; none for the transaction's own.
 * @returns the scope.
 */
export function newScope(parent?: Scope): Scope {
  return { failed: false, error: undefined, ended: false, savepointOpen: false, parent };
}

/**
 * Whether a scope's run is over, or the run of a scope it was opened from:
 * a savepoint whose parent's verdict was given no longer exists (RELEASE
 * and ROLLBACK TO destroy the savepoints made after theirs). Read afresh,
 * since it changes while a nested run awaits.
 *
 * @param scope the scope.
 * @returns true when a statement of it must not be sent.
 */
export function scopeOver(scope: Scope): boolean {
  for (let s: Scope | undefined = scope; s !== undefined; s = s.parent) if (s.ended) return true;
  return false;
}

/** A settled promise's outcome. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

/**
 * Waits for a promise and reports how it ended, never rejecting.
 *
 * @param p the promise.
 * @returns its value or its error.
 */
export async function settle<T>(p: PromiseLike<T>): Promise<Settled<T>> {
  try {
    return { ok: true, value: await p };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * Thrown by a transaction's client when code keeps using a unit of work
 * whose transaction already ended (committed, rolled back, its connection
 * lost or timed out).
 */
export class TransactionEndedError extends Error {
  override readonly name = 'TransactionEndedError';
  /** Maps to 503 like a lost connection: the client may try again. */
  readonly code = 'CONNECTION_CLOSED';
  /** @param cause why the transaction ended. */
  constructor(cause: unknown) {
    super("the unit of work's transaction has ended (connection lost or timed out)", { cause });
  }
}

/**
 * Thrown when a unit of work heard nothing it was waiting for within its
 * deadline: no connection came, or the transaction's connection went
 * silent (a peer gone without a close, a network that drops every byte).
 * The connection is closed; the outcome of a COMMIT already sent is
 * unknown, which the unit of work reports as such.
 */
export class ConnectionStalledError extends Error {
  override readonly name = 'ConnectionStalledError';
  /** Maps to 503 like a lost connection: the client may try again. */
  readonly code = 'CONNECTION_STALLED';
  /**
   * @param what what was awaited.
   * @param ms the deadline, in milliseconds.
   */
  constructor(what: string, ms: number) {
    super(`${what}: nothing heard from the database within ${String(ms)} ms`);
  }
}

/**
 * Hands out connections reserved from a pool, working around postgres.js
 * 3.4.9 dropping a reservation: when a connection closes while a
 * reservation waits in the pool's queue, the pool reconnects it with that
 * reservation as its first query, and the connection then forgets it
 * (connection.js, ReadyForQuery: `initial.reserve && (initial = null)`
 * assumes the reservation is still queued, but the pool's onclose took it
 * out), so it never settles and its caller waits forever. This is what
 * hung a keyed request in the failover soak (docs/adr/0003-own-transactions.md).
 *
 * Each wait asks the pool once, and the waits ask once more each time a
 * connection of the pool closes while any wait is pending (a close drops at
 * most one reservation: the pool takes one queued request off its queue
 * then); for a pool {@link createSql} did not make, once a second while
 * any wait is pending. Whatever an ask brings goes to the oldest wait still
 * pending, and back to the pool when none is; a failed ask fails the oldest
 * wait. So asks never outnumber the waits and the closes, and no connection
 * is left with nobody. Each wait is bounded by a deadline.
 */
export class Reservations {
  readonly #pool: Sql;
  readonly #waits: Wait[] = [];
  readonly #heard: boolean;
  #poll: NodeJS.Timeout | undefined;

  /** @param pool the application role's pool. */
  constructor(pool: Sql) {
    this.#pool = pool;
    const off = onConnectionClose(pool, () => {
      // Not now: the pool is still handing the closed connection its next
      // queued request, and an ask made here would race that.
      setImmediate(() => {
        if (this.#waits.length > 0) this.#ask();
      });
    });
    this.#heard = off !== undefined;
  }

  /**
   * Reserves a connection.
   *
   * @param deadlineMs how long to wait at most (0: no bound).
   * @returns the reserved connection.
   * @throws ConnectionStalledError when none came in time; what reserving
   *   throws (the connection could not be opened).
   */
  reserve(deadlineMs: number): Promise<postgres.ReservedSql> {
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const wait: Wait = {
        give: (reserved) => {
          clearTimeout(timer);
          resolve(reserved);
        },
        fail: (err) => {
          clearTimeout(timer);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      };
      this.#waits.push(wait);
      if (deadlineMs > 0) {
        timer = setTimeout(() => {
          if (!this.#drop(wait)) return;
          reject(new ConnectionStalledError('waiting for a database connection', deadlineMs));
        }, deadlineMs);
      }
      if (!this.#heard && this.#poll === undefined) {
        this.#poll = setInterval(() => {
          if (this.#waits.length > 0) this.#ask();
        }, 1000);
      }
      this.#ask();
    });
  }

  /** Asks the pool for one connection, for whichever wait is oldest when it comes. */
  #ask(): void {
    this.#pool.reserve().then(
      (reserved) => {
        const wait = this.#next();
        if (wait === undefined) reserved.release();
        else wait.give(reserved);
      },
      (err: unknown) => {
        this.#next()?.fail(err);
      },
    );
  }

  #next(): Wait | undefined {
    const wait = this.#waits.shift();
    if (this.#waits.length === 0 && this.#poll !== undefined) {
      clearInterval(this.#poll);
      this.#poll = undefined;
    }
    return wait;
  }

  #drop(wait: Wait): boolean {
    const index = this.#waits.indexOf(wait);
    if (index === -1) return false;
    this.#waits.splice(index, 1);
    if (this.#waits.length === 0 && this.#poll !== undefined) {
      clearInterval(this.#poll);
      this.#poll = undefined;
    }
    return true;
  }
}

/** One caller waiting for a connection. */
interface Wait {
  give(reserved: postgres.ReservedSql): void;
  fail(err: unknown): void;
}

/** postgres.js's own errors for a connection that closed or was ended. */
const DRIVER_LOST: ReadonlySet<string> = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
]);

/**
 * Whether an error means the connection is gone: postgres.js's own
 * connection errors, an error of the socket (a reset, a broken pipe: it
 * carries a system call, and the socket closes a few ticks later), or a
 * FATAL or PANIC error of the server, which always ends the session
 * (terminate, shutdown, failover, transaction or idle timeout). An ERROR,
 * whatever its SQLSTATE (a function may raise 08006 itself), leaves the
 * session alive: the transaction is only aborted, and rolls back as usual.
 *
 * @param err a statement's error.
 * @returns true for a lost session or socket.
 */
export function connectionLost(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  // Our own refusal of a statement sent too late says nothing about the
  // connection (its code only maps it to 503).
  if (err instanceof TransactionEndedError) return false;
  const { code, severity, syscall } = err as {
    code?: unknown;
    severity?: unknown;
    syscall?: unknown;
  };
  if (typeof code === 'string' && DRIVER_LOST.has(code)) return true;
  if (typeof syscall === 'string') return true;
  return severity === 'FATAL' || severity === 'PANIC';
}

/** Methods a transaction's client refuses: they would end, nest or leave the transaction. */
const REFUSED: ReadonlySet<string> = new Set([
  'begin',
  'reserve',
  'release',
  'end',
  'close',
  'listen',
  'subscribe',
  'savepoint',
  'prepare',
  'largeObject',
]);

/** What `life.ended` holds once COMMIT has been sent. */
export const COMMITTED = new Error('the unit of work committed');
/** The cause of a statement refused because its savepoint's run is over. */
export const SAVEPOINT_ENDED = new Error("the savepoint's run is over");
/** What `life.ended` holds once ROLLBACK has been sent. */
const ROLLED_BACK = new Error('the unit of work rolled back');

/** The part of a postgres.js connection this class touches. */
interface Connection {
  onclose: ((err: unknown) => void) | null;
  /** Ends the session at once, resolving a pending `end()` of the pool. */
  terminate(): void;
}

/** One transaction on a reserved connection; see the module comment. */
export class ConnectionTransaction {
  /**
   * Set when the transaction ended (COMMIT or ROLLBACK sent, the connection
   * lost); from then on no statement is sent.
   */
  readonly life: { ended: unknown } = { ended: undefined };
  /** Rejects when the connection is lost while the transaction is open. */
  readonly closed: Promise<never>;
  /** How BEGIN ended; it is answered before anything after it. */
  readonly began: Promise<Settled<unknown>>;
  readonly #reserved: postgres.ReservedSql;
  readonly #closing: () => boolean;
  /** Settles as a failure when the connection is lost; never resolves otherwise. */
  readonly #lostAnswer: Promise<{ ok: false; error: unknown }>;
  #reject: (err: unknown) => void = () => undefined;
  #connection: Connection | undefined;
  #lost = false;
  /** 'open' until COMMIT or ROLLBACK is answered; 'unknown' when that answer was an error of the client. */
  #state: 'open' | 'ended' | 'unknown' = 'open';
  #savepoints = 0;
  #finished = false;
  #stall: NodeJS.Timeout | undefined;
  readonly #spans: StatementSpans | undefined;

  private constructor(
    reserved: postgres.ReservedSql,
    closing: () => boolean,
    deadlineMs: number,
    spans: StatementSpans | undefined,
  ) {
    this.#reserved = reserved;
    this.#closing = closing;
    this.#spans = spans;
    if (deadlineMs > 0) {
      this.#stall = setTimeout(() => {
        this.#stalled(deadlineMs);
      }, deadlineMs);
    }
    this.closed = new Promise<never>((_, reject) => {
      this.#reject = reject;
    });
    this.#lostAnswer = this.closed.then(
      () => ({ ok: false, error: undefined }),
      (error: unknown) => ({ ok: false, error }),
    );
    const onexecute = (connection: Connection): boolean => {
      this.#connection = connection;
      connection.onclose = (err: unknown) => {
        this.#lose(err);
      };
      // True: the connection may take the next statement at once.
      return true;
    };
    const begin = reserved
      .unsafe('begin isolation level read committed', [], {
        onexecute,
      } as postgres.UnsafeQueryOptions)
      .execute();
    spans?.sent('begin', begin);
    this.began = settle(begin);
  }

  /**
   * Reserves a connection and sends BEGIN on it, without waiting for its
   * answer.
   *
   * @param reservations where connections come from.
   * @param closing whether the pool is being closed: a transaction that
   *   ends then closes its connection instead of handing it back, since
   *   postgres.js never ends a reserved connection handed back during
   *   `end()`, which would then wait for it until its timeout.
   * @param deadlines how long the wait for a connection may last, and the
   *   transaction after it, before the transaction is presumed stalled and
   *   its connection closed (0: no bound).
   * @param spans where each statement's span begins, BEGIN's included, if
   *   statements are traced.
   * @returns the transaction, open.
   * @throws ConnectionStalledError when no connection came in time; what
   *   reserving a connection throws (it cannot connect).
   */
  static async open(
    reservations: Reservations,
    closing: () => boolean,
    deadlines: { readonly reserveMs: number; readonly transactionMs: number },
    spans?: StatementSpans,
  ): Promise<ConnectionTransaction> {
    const reserved = await reservations.reserve(deadlines.reserveMs);
    return new ConnectionTransaction(reserved, closing, deadlines.transactionMs, spans);
  }

  /**
   * Waits for a statement's outcome, or for the connection to be lost,
   * whichever comes first. postgres.js never settles a statement that waits
   * in a reserved connection's own queue when the connection closes, nor
   * one written after the socket failed and before it closed.
   *
   * @param outcome the statement's settled outcome.
   * @returns that outcome, or the loss.
   */
  settled<T>(outcome: Promise<Settled<T>>): Promise<Settled<T>> {
    return Promise.race([outcome, this.#lostAnswer]);
  }

  /**
   * The client of one scope: every statement is refused once the
   * transaction ended, its failure is recorded in the scope, and a failure
   * that means the connection is gone ends the transaction at once.
   *
   * @param scope where the scope keeps its first failure.
   * @returns the client.
   */
  client(scope: Scope): TransactionSql {
    return observed(
      this.#reserved,
      () => {
        if (this.life.ended !== undefined) throw new TransactionEndedError(this.life.ended);
        if (scopeOver(scope)) throw new TransactionEndedError(SAVEPOINT_ENDED);
        if (scope.savepointOpen) throw new OverlappingSavepointError('a statement');
      },
      (err) => {
        if (connectionLost(err)) this.#lose(err);
        if (!scope.failed) {
          scope.failed = true;
          scope.error = err;
        }
      },
      REFUSED,
      undefined,
      this.#spans,
    );
  }

  /** A fresh savepoint name for this transaction. */
  nextSavepoint(): string {
    this.#savepoints += 1;
    return `s${String(this.#savepoints)}`;
  }

  /**
   * Sends COMMIT through the outermost scope's client; nothing is sent after it.
   *
   * @param tx the outermost scope's client.
   * @returns how COMMIT ended (PostgreSQL answers `ROLLBACK` for a
   *   transaction that a failed statement aborted), and whether it was
   *   written to the connection at all.
   */
  async commit(tx: TransactionSql): Promise<{
    readonly answer: Settled<postgres.RowList<postgres.Row[]>>;
    readonly written: boolean;
  }> {
    const query = tx.unsafe('commit').execute();
    const sent = settle(query);
    this.life.ended = COMMITTED;
    const answer = await this.settled(sent);
    // An error from the server ends the transaction too; any other (the
    // client's) leaves the session in doubt.
    this.#state =
      answer.ok || (answer.error as { name?: unknown }).name === 'PostgresError'
        ? 'ended'
        : 'unknown';
    // postgres.js gives a statement its connection's state (null until
    // then) when it writes it; one still waiting in the reserved connection's own queue (behind
    // a statement being described) never reached the server.
    const state = (query as unknown as { state?: unknown }).state;
    const written = state !== null && state !== undefined;
    return { answer, written };
  }

  /**
   * Sends ROLLBACK unless the transaction already ended, and waits for it;
   * never throws (a failed ROLLBACK leaves the session in doubt, and
   * {@link finish} closes it).
   *
   * @param tx the outermost scope's client.
   */
  async rollback(tx: TransactionSql): Promise<void> {
    if (this.life.ended !== undefined) return;
    const sent = settle(tx.unsafe('rollback').execute());
    this.life.ended = ROLLED_BACK;
    this.#state = (await this.settled(sent)).ok ? 'ended' : 'unknown';
  }

  /**
   * Gives the connection back to the pool when the transaction ended with an
   * answer; closes a connection in doubt; leaves a lost one to the pool,
   * which reconnects it. Safe to call twice.
   */
  finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    clearTimeout(this.#stall);
    if (this.#connection !== undefined) this.#connection.onclose = null;
    if (this.#lost) return;
    if (this.#state === 'ended' && this.#connection !== undefined) {
      if (this.#closing()) this.#connection.terminate();
      else this.#reserved.release();
      return;
    }
    // Open (a bug upstream), or in doubt: never handed to another caller.
    this.#lost = true;
    this.life.ended ??= ROLLED_BACK;
    void settle(this.#reserved.unsafe('select pg_terminate_backend(pg_backend_pid())').execute());
  }

  /**
   * The deadline passed with the transaction still open: whatever it waits
   * for is not coming (PostgreSQL's own transaction_timeout would have
   * ended the session by now, and its close would have been heard). The
   * connection is ended from this side, so its queries fail and the pool
   * opens a new one once the socket has closed.
   */
  #stalled(ms: number): void {
    if (this.#finished || this.#lost) return;
    this.#lose(new ConnectionStalledError('a transaction', ms));
    this.#connection?.terminate();
  }

  #lose(err: unknown): void {
    this.#lost = true;
    this.life.ended ??= err;
    this.#reject(err);
  }
}
