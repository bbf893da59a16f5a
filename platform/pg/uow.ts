/**
 * The unit of work over postgres.js: one AsyncLocalStorage holds the current
 * transaction, adapters reach it through {@link PgDatabase}, and the
 * outermost run retries what PostgreSQL calls retryable. Each transaction
 * runs on a connection reserved from the pool and is driven by hand
 * (transaction.ts), so BEGIN and every SAVEPOINT travel with the
 * statements after them.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  claimKeyedTransaction,
  isRetryable,
  OverlappingSavepointError,
  decidedOf,
  DecidingUnitOfWork,
  type Decided,
  type UnitOfWorkOptions,
  type Verdict,
} from '../../kernel/txn/index.js';
import type { TransactionSql } from './client.js';
import { PgDatabase, type Frame } from './database-handle.js';
import {
  ConnectionTransaction,
  newScope,
  scopeOver,
  SAVEPOINT_ENDED,
  settle,
  TransactionEndedError,
  type Scope,
  type Settled,
} from './transaction.js';

export { checkedResult, IncompleteResultError, UnansweredResultError } from './observed.js';
export { PgDatabase } from './database-handle.js';
export { ConnectionStalledError, TransactionEndedError } from './transaction.js';

/**
 * Thrown when a COMMIT was sent and its answer never came (the connection
 * was lost or went silent after it): the transaction may have committed or
 * not. The caller must not say that nothing happened; a keyed request
 * repeated with its key gets the stored answer if it committed, and runs
 * afresh if it did not.
 */
export class CommitOutcomeUnknownError extends Error {
  override readonly name = 'CommitOutcomeUnknownError';
  /** Maps to 503 `commit_outcome_unknown`. */
  readonly code = 'COMMIT_OUTCOME_UNKNOWN';
  /** @param cause why the answer never came. */
  constructor(cause: unknown) {
    super('the COMMIT was sent and its answer lost: the transaction may have committed', {
      cause,
    });
  }
}

/**
 * Whether a COMMIT's failure leaves its outcome unknown: anything but an
 * ERROR answered by PostgreSQL (a FATAL ends the session while the commit
 * may already be done, for example while it waits for a standby).
 */
function commitOutcomeUnknown(err: unknown): boolean {
  const { name, severity } = (err ?? {}) as { name?: unknown; severity?: unknown };
  return name !== 'PostgresError' || severity !== 'ERROR';
}

/** Timeouts applied to every transaction, in milliseconds (0 disables one). */
export interface TransactionTimeouts {
  readonly lockTimeoutMs: number;
  readonly statementTimeoutMs: number;
  readonly transactionTimeoutMs: number;
}

/**
 * The unit of work's settings from the `database` configuration group: the
 * three timeouts and the retries, the same for the server and the CLI.
 *
 * @param database `database.lock_timeout`, `statement_timeout`,
 *   `transaction_timeout` (ms) and `tx_retry_max`.
 * @returns the options of {@link PgUnitOfWork}.
 */
export function unitOfWorkSettings(database: {
  readonly lock_timeout: number;
  readonly statement_timeout: number;
  readonly transaction_timeout: number;
  readonly connect_timeout: number;
  readonly tx_retry_max: number;
}): PgUnitOfWorkOptions {
  return {
    lockTimeoutMs: database.lock_timeout,
    statementTimeoutMs: database.statement_timeout,
    transactionTimeoutMs: database.transaction_timeout,
    connectTimeoutMs: database.connect_timeout,
    retryMax: database.tx_retry_max,
  };
}

/**
 * How long past `database.transaction_timeout` the process waits for a
 * transaction's connection before it presumes the connection stalled and
 * closes it: PostgreSQL ends the session at the timeout itself, so a
 * transaction still open this much later has a connection nothing comes
 * through any more.
 */
export const STALL_GRACE_MS = 1000;

/** Context given to the test fault hook. */
export interface FaultContext {
  /** The attempt about to commit (1 is the first run). */
  readonly attempt: number;
  /** The unit of work's name, when given. */
  readonly name: string | undefined;
}

/** Options of {@link PgUnitOfWork}. */
export interface PgUnitOfWorkOptions extends TransactionTimeouts {
  /** Retries after the first attempt (`database.tx_retry_max`). */
  readonly retryMax: number;
  /**
   * `database.connect_timeout`: with the transaction timeout, how long an
   * attempt may wait for a connection (one may have to be opened, and a busy
   * pool frees one within a transaction's life). Default 5000.
   */
  readonly connectTimeoutMs?: number;
  /** Base of the jittered exponential backoff between attempts, in ms (default 5). */
  readonly backoffBaseMs?: number;
  /**
   * Test only: called after `fn` resolves and before COMMIT; a SQLSTATE it
   * returns is raised by PostgreSQL itself in the transaction, so the failure
   * is as real as a deadlock would be.
   */
  readonly faultHook?: (ctx: FaultContext) => string | undefined;
  /** Called before each retry, for logs and metrics. */
  readonly onRetry?: (ctx: { attempt: number; code: string; name: string | undefined }) => void;
}

/**
 * {@link UnitOfWork} over postgres.js. See the port for the contract.
 */
export class PgUnitOfWork extends DecidingUnitOfWork {
  private readonly settings: readonly [string, string, string];
  /**
   * The pool was made with these very timeouts as its sessions' defaults
   * (createSql's `session` option); once the database confirms them
   * ({@link PgDatabase.confirmSessionTimeouts}), BEGIN is sent without
   * them. SET LOCAL never outlives its transaction, so a session's values
   * are its startup ones when each transaction begins.
   */
  private readonly preset: boolean;

  /**
   * @param db the database whose ambient storage this unit of work fills.
   * @param options timeouts, retries and the test fault hook.
   */
  constructor(
    private readonly db: PgDatabase,
    private readonly options: PgUnitOfWorkOptions,
  ) {
    super();
    const session = db.sessionTimeouts;
    this.preset =
      session !== undefined &&
      session.lockTimeoutMs === options.lockTimeoutMs &&
      session.statementTimeoutMs === options.statementTimeoutMs &&
      session.transactionTimeoutMs === options.transactionTimeoutMs;
    this.settings = [
      `${String(options.lockTimeoutMs)}ms`,
      `${String(options.statementTimeoutMs)}ms`,
      `${String(options.transactionTimeoutMs)}ms`,
    ];
  }

  /** @inheritdoc */
  inTransaction(): boolean {
    return this.db.storage.getStore() !== undefined;
  }

  /** @inheritdoc */
  protected async perform<T>(
    fn: () => Promise<Verdict<T>>,
    options: UnitOfWorkOptions,
  ): Promise<Decided<T>> {
    const outer = this.db.storage.getStore();
    if (outer) {
      if (options.nested !== true) return decidedOf(await fn());
      if (outer.life.ended !== undefined) throw new TransactionEndedError(outer.life.ended);
      return this.savepoint(outer, fn);
    }
    // No ambient transaction of this database: inside a keyed request this
    // must be the key's own, or its writes would commit without the key.
    claimKeyedTransaction('a unit of work opening a transaction');
    const transactionMs = this.options.transactionTimeoutMs;
    const deadlines =
      transactionMs > 0
        ? {
            reserveMs: transactionMs + (this.options.connectTimeoutMs ?? 5000),
            transactionMs: transactionMs + STALL_GRACE_MS,
          }
        : { reserveMs: 0, transactionMs: 0 };
    for (let attempt = 1; ; attempt++) {
      const tails: Promise<Settled<unknown>>[] = [];
      const onCommit: (() => void)[] = [];
      // An object, not a let: it is set by a callback.
      const progress = { fnSettled: true };
      // What fn said to keep: a failure after it is the commit's.
      let kept: Verdict<T> | undefined;
      let txn: ConnectionTransaction | undefined;
      try {
        txn = await ConnectionTransaction.open(
          this.db.reservations,
          () => this.db.closing,
          deadlines,
          this.db.statementSpans,
        );
        const scope = newScope();
        const tx = txn.client(scope);
        // Sent without waiting, with BEGIN and fn's first statement in one write.
        const configured: Promise<Settled<unknown>> =
          this.preset && this.db.sessionTimeoutsConfirmed
            ? Promise.resolve({ ok: true, value: null })
            : settle(
                tx`
                select set_config('lock_timeout', ${this.settings[0]}, true),
                       set_config('statement_timeout', ${this.settings[1]}, true),
                       set_config('transaction_timeout', ${this.settings[2]}, true)`.execute(),
              );
        const frame: Frame = {
          tx,
          txn,
          scope,
          attempt,
          life: txn.life,
          tails,
          onCommit,
          nested: false,
        };
        progress.fnSettled = false;
        // fn is called inside a promise: a synchronous throw fails the run
        // like a rejection.
        const running = settle(Promise.resolve().then(() => this.db.storage.run(frame, fn)));
        void running.then(() => {
          progress.fnSettled = true;
        });
        // The connection closing rejects at once, even while fn still runs:
        // a stuck function must not keep its caller waiting.
        let outcome = await Promise.race([running, txn.closed]);
        if (outcome.ok && !isVerdict(outcome.value)) {
          outcome = {
            ok: false,
            error: new TypeError('decide: fn must resolve with { keep, value }'),
          };
        }
        // A savepoint still running when fn settled outlived it: nothing of
        // this transaction can be trusted to be what fn decided. The
        // rollback goes through a client of its own (this scope's refuses
        // statements while a savepoint of it is open).
        const outlived = scope.savepointOpen;
        if (outlived) {
          outcome = {
            ok: false,
            error: new OverlappingSavepointError('a nested unit of work still running'),
          };
        }
        const ending = outlived ? txn.client(newScope()) : tx;
        const began = await txn.settled(txn.began);
        const settings = await txn.settled(configured);
        let decided = scopeOutcome(began, outcome, settings, scope);
        if (decided.ok && !decided.value.keep) {
          await txn.rollback(ending);
          return { kind: 'discarded', value: decided.value.value };
        }
        if (decided.ok) kept = decided.value;
        const fault = decided.ok
          ? this.options.faultHook?.({ attempt, name: options.name })
          : undefined;
        if (fault !== undefined) {
          const injected = await txn.settled(settle(raiseSqlState(tx, fault)));
          if (!injected.ok) decided = injected;
        }
        if (!decided.ok) {
          await txn.rollback(ending);
          throw decided.error;
        }
        // The COMMIT runs to its end, in the same write as this: a
        // statement_timeout during the wait for a synchronous standby
        // cancels the wait, and PostgreSQL then reports success for a
        // commit the standby may not have; transaction_timeout would end
        // the session after the local commit (docs/adr/0002-scale-out.md).
        tails.push(
          settle(
            tx`select set_config('statement_timeout', '0', true),
                      set_config('transaction_timeout', '0', true)`.execute(),
          ),
        );
        const open = txn;
        const [sent, committed] = await Promise.all([
          Promise.all(tails.map((tail) => open.settled(tail))),
          open.commit(tx),
        ]);
        const { answer, written } = committed;
        if (!answer.ok) {
          if (written && commitOutcomeUnknown(answer.error)) {
            throw new CommitOutcomeUnknownError(answer.error);
          }
          throw answer.error;
        }
        // Sent ahead of the COMMIT: one that failed aborted the transaction,
        // and PostgreSQL answered the COMMIT with a rollback. Those that only
        // met the aborted transaction (25P02) are not the cause.
        for (const tail of sent) {
          if (!tail.ok && sqlState(tail.error) !== '25P02') throw tail.error;
        }
        if (answer.value.command !== 'COMMIT') throw new TransactionAbortedError();
        // Committed, but a tail the client never sent failed: report it.
        for (const tail of sent) if (!tail.ok) throw tail.error;
        for (const committed of onCommit) {
          try {
            committed();
          } catch {
            // Documented as ignored: the caller must learn of the commit.
          }
        }
        return { kind: 'kept', value: decided.value.value };
      } catch (err) {
        // Never run fn again beside its own live twin.
        if (!progress.fnSettled) throw err;
        if (attempt > this.options.retryMax || !isRetryable(err)) {
          if (kept !== undefined) return { kind: 'commit_failed', value: kept.value, error: err };
          throw err;
        }
        this.options.onRetry?.({
          attempt,
          code: (err as { code: string }).code,
          name: options.name,
        });
        options.onRetry?.(err, attempt);
        const base = this.options.backoffBaseMs ?? 5;
        txn?.finish();
        await sleep(Math.random() * base * 2 ** (attempt - 1));
      } finally {
        txn?.finish();
      }
    }
  }

  /**
   * A nested run in a savepoint: SAVEPOINT is sent and `fn` starts at once,
   * so its first statement travels with it. A failure of any statement sent
   * in the savepoint (even one `fn` caught) rolls back to it and rejects;
   * `fn` saying not to keep rolls back to it and resolves.
   */
  private async savepoint<T>(outer: Frame, fn: () => Promise<Verdict<T>>): Promise<Decided<T>> {
    const { txn } = outer;
    // Started from a savepoint whose run is over (detached work), it would
    // write into the outer transaction after that savepoint's verdict.
    if (scopeOver(outer.scope)) throw new TransactionEndedError(SAVEPOINT_ENDED);
    if (outer.scope.savepointOpen) throw new OverlappingSavepointError('a nested unit of work');
    const name = txn.nextSavepoint();
    const scope = newScope(outer.scope);
    const tx = txn.client(scope);
    outer.scope.savepointOpen = true;
    try {
      const opened = settle(tx.unsafe(`savepoint ${name}`).execute());
      // fn is called inside a promise: a synchronous throw or a value that
      // is no verdict fails the savepoint like a rejection, never leaving
      // its writes to the outer transaction.
      let outcome: Settled<Verdict<T>> = await settle(
        Promise.resolve().then(() =>
          this.db.storage.run({ ...outer, tx, scope, nested: true }, fn),
        ),
      );
      if (outcome.ok && !isVerdict(outcome.value)) {
        outcome = {
          ok: false,
          error: new TypeError('decide: fn must resolve with { keep, value }'),
        };
      }
      // A savepoint opened inside this run and still running outlived it:
      // its verdict would come after this one, over writes this verdict
      // decided. This run fails, and its rollback takes that savepoint too.
      if (scope.savepointOpen) {
        outcome = {
          ok: false,
          error: new OverlappingSavepointError('a nested unit of work still running'),
        };
      }
      // Its client sends nothing more: a detached statement would otherwise
      // land in the outer transaction after the savepoint's verdict.
      scope.ended = true;
      const savepointOpened = await txn.settled(opened);
      const decided = scopeOutcome(savepointOpened, outcome, { ok: true, value: null }, scope);
      if (decided.ok && decided.value.keep) return { kind: 'kept', value: decided.value.value };
      // An outer scope that is over had its savepoint released or rolled
      // back, which destroyed this one and what it did; a transaction that
      // ended needs nothing more.
      if (txn.life.ended === undefined && !scopeOver(outer.scope)) {
        // Queued before the outer scope may send again, through a client of
        // its own (the outer one refuses statements while this savepoint is
        // open); if it fails, the outer scope fails: the transaction cannot
        // commit.
        let rollback: Promise<Settled<unknown>>;
        try {
          rollback = settle(
            txn.client(newScope()).unsafe(`rollback to savepoint ${name}`).execute(),
          );
        } catch (err) {
          rollback = Promise.resolve({ ok: false, error: err });
        }
        outer.scope.savepointOpen = false;
        const rolled = await txn.settled(rollback);
        if (!rolled.ok && !outer.scope.failed) {
          outer.scope.failed = true;
          outer.scope.error = rolled.error;
        }
      }
      if (decided.ok) return { kind: 'discarded', value: decided.value.value };
      throw decided.error;
    } finally {
      outer.scope.savepointOpen = false;
    }
  }
}

/**
 * Thrown when PostgreSQL answered a COMMIT with a rollback though no
 * statement seen by the unit of work failed (one sent and never awaited).
 */
export class TransactionAbortedError extends Error {
  override readonly name = 'TransactionAbortedError';
  constructor() {
    super('PostgreSQL rolled the transaction back at COMMIT: a statement in it failed');
  }
}

/**
 * How a scope ended: `fn`'s verdict, or the failure that decides it. BEGIN
 * or SAVEPOINT first, then what `fn` threw (the scope's own first failure
 * when `fn` only saw the aborted transaction, 25P02), then a verdict not to
 * keep (it stands even when a statement in the scope failed and `fn`
 * answered for it, a caught 23505 told as a final 409: everything is rolled
 * back anyway; not when that failure is retryable), then the settings,
 * then a failed statement `fn` caught.
 */
function scopeOutcome<T>(
  opened: Settled<unknown>,
  outcome: Settled<Verdict<T>>,
  settings: Settled<unknown>,
  scope: Scope,
): Settled<Verdict<T>> {
  if (!opened.ok) return opened;
  if (!outcome.ok) {
    const aborted = sqlState(outcome.error) === '25P02';
    return aborted && scope.failed ? { ok: false, error: scope.error } : outcome;
  }
  // A retryable failure fn caught (a serialization failure told as a 409)
  // is no answer to keep: the whole function runs again.
  if (!outcome.value.keep && !(scope.failed && isRetryable(scope.error))) return outcome;
  if (!settings.ok) return settings;
  if (scope.failed) return { ok: false, error: scope.error };
  return outcome;
}

/** Whether fn's value is a verdict; a JavaScript caller may resolve with anything. */
function isVerdict(value: unknown): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { keep?: unknown }).keep === 'boolean'
  );
}

function sqlState(err: unknown): unknown {
  return (err as { code?: unknown } | null)?.code;
}

async function raiseSqlState(tx: TransactionSql, sqlstate: string): Promise<void> {
  await tx`select set_config('fault.sqlstate', ${sqlstate}, true)`;
  await tx`do $$ begin raise exception 'injected fault' using errcode = current_setting('fault.sqlstate'); end $$`;
}
