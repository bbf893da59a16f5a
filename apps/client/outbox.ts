/**
 * The durable local outbox: every write the caller intends is stored here,
 * with its key, before the first byte of it is sent, and its final answer is
 * stored here when it comes. A node:sqlite file in WAL mode with synchronous
 * commits (`synchronous = FULL`: a commit is on disk when `enqueue` returns),
 * held with an exclusive lock (`locking_mode = EXCLUSIVE`) for as long as it
 * is open, so one process writes to it at a time; the operating system drops
 * the lock when the process dies, SIGKILL included, so a crash never leaves a
 * stale lock behind.
 *
 * node:sqlite is loaded when the first outbox is opened, not when this
 * module is imported, so a program can filter the ExperimentalWarning some
 * Node.js 24 releases print for it first (warnings.ts).
 */
import type { DatabaseSync } from 'node:sqlite';
import { OutboxError, OutboxPrincipalError, storageError } from './outbox-errors.js';
import {
  canonicalBody,
  type FinalRecord,
  type Intent,
  type IntentState,
  type NewIntent,
  type OutboxOptions,
  type StorageSettings,
} from './outbox-intent.js';
import { openDatabase, quickCheck, readStorage } from './outbox-open.js';
import { LANE_HEADS, UNREPORTED_EQUAL_SQL, parseRow } from './outbox-rows.js';
import {
  attemptStarted,
  keyLifetimeSeen,
  expired,
  raiseHighWater,
  reported,
  retryLater,
  settled,
  stated,
} from './outbox-transitions.js';

export * from './outbox-errors.js';
export * from './outbox-intent.js';
export { checkKey, keyTime, newKey } from './outbox-keys.js';
export { UNREPORTED_EQUAL_SQL } from './outbox-rows.js';

/** A durable outbox file, open for writing by this process alone. */
export class Outbox {
  private db: DatabaseSync | undefined;

  private constructor(
    /** The file's path as given. */
    readonly file: string,
    db: DatabaseSync,
    private readonly clock: () => number,
  ) {
    this.db = db;
  }

  /**
   * Opens (or creates) an outbox file and takes its lock; a file of an
   * older schema version is migrated to version 6 in one transaction.
   *
   * @param file the file's path; a new file is created (its folder must
   *   exist) unless `options.create` is false.
   * @param options the clock stamping new intents, and whether to create.
   * @returns the open outbox; close it when done.
   * @throws OutboxLockedError when another connection holds the file.
   * @throws OutboxDamagedError when a page read while opening is damaged.
   * @throws OutboxOpenError when the file cannot be opened, is not a SQLite
   *   database, holds other tables, was written by a newer client, or its
   *   migration failed (it is left as it was); when it is `:memory:`, a
   *   `file:` URI, or not WAL (in memory or temporary); another user's or
   *   writable by others; missing or empty when `options.create` is false.
   */
  static open(file: string, options: OutboxOptions = {}): Outbox {
    return new Outbox(file, openDatabase(file, options), options.clock ?? Date.now);
  }

  private get open(): DatabaseSync {
    if (this.db === undefined) throw new OutboxError(`outbox ${this.file} is closed`);
    return this.db;
  }

  /**
   * The storage settings in force, for a check or a report.
   *
   * @returns journal mode, synchronous level and locking mode, in lower
   *   case, and whether foreign keys are enforced.
   */
  storage(): StorageSettings {
    return readStorage(this.open);
  }

  /**
   * States an intent: stores it, with its key and creation time, durably.
   * Nothing is sent here; a {@link Sender} sends it.
   *
   * @param intent what to send and how to order it.
   * @returns the intent, and whether it is new (false: the key was in the
   *   outbox already for the same method, path and body).
   * @throws IntentConflictError when the key is in the outbox for another request.
   * @throws RangeError for a key that is not a UUIDv7, a path that does not
   *   start with `/`, starts with `//`, holds a control character or has a
   *   query, an empty lane or an unknown method.
   */
  enqueue(intent: NewIntent): { intent: Intent; created: boolean } {
    return stated(this.open, this.file, intent, this.clock);
  }

  /**
   * The first intent equal to a new one whose result was never reported
   * (see {@link UNREPORTED_EQUAL_SQL}): pending, or settled while no command
   * printed its result (its process was killed after the answer was
   * recorded, or a drain or a library caller settled it). Stating the new
   * one would send the same request again under a new key.
   *
   * @param wanted the intent about to be stated.
   * @returns the intent, or undefined when there is none.
   * @throws OutboxCorruptError when its row is corrupt.
   */
  unreportedEqual(wanted: NewIntent): Intent | undefined {
    const row = this.open
      .prepare(UNREPORTED_EQUAL_SQL)
      .get(wanted.operation, wanted.path, wanted.method, canonicalBody(wanted));
    return row === undefined ? undefined : parseRow(this.file, row);
  }

  /**
   * Reads one intent by its key.
   *
   * @param key the Idempotency-Key (either case).
   * @returns the intent, or undefined when the outbox has none with that key.
   * @throws OutboxCorruptError when its row is corrupt.
   */
  get(key: string): Intent | undefined {
    const row = this.open.prepare('select * from intents where key = ?').get(key.toLowerCase());
    return row === undefined ? undefined : parseRow(this.file, row);
  }

  /**
   * Lists intents in the order they were stated.
   *
   * @param filter only intents in this state, when given.
   * @returns the intents.
   * @throws OutboxCorruptError naming the first corrupt row.
   */
  list(filter: { readonly state?: IntentState } = {}): Intent[] {
    const db = this.open;
    const rows =
      filter.state === undefined
        ? db.prepare('select * from intents order by seq').all()
        : db.prepare('select * from intents where state = ? order by seq').all(filter.state);
    return rows.map((r) => parseRow(this.file, r));
  }

  /**
   * The intents that may be sent now: pending, due, not in flight, and first
   * among the pending intents of each of their lanes.
   *
   * @param now the current time in milliseconds since the epoch.
   * @param inFlight sequence numbers being sent already.
   * @param limit at most this many.
   * @returns the intents, in the order stated.
   * @throws OutboxCorruptError when one of them is corrupt.
   */
  ready(now: number, inFlight: ReadonlySet<number>, limit: number): Intent[] {
    const rows = this.open
      .prepare(`${LANE_HEADS} and i.next_attempt_at <= ? order by i.seq`)
      .all(now);
    const out: Intent[] = [];
    for (const row of rows) {
      if (out.length >= limit) break;
      if (inFlight.has(Number(row['seq']))) continue;
      out.push(parseRow(this.file, row));
    }
    return out;
  }

  /**
   * When the next intent that heads its lanes is due.
   *
   * @param inFlight sequence numbers being sent already, left out.
   * @returns milliseconds since the epoch, or undefined when nothing is pending.
   */
  nextAttemptAt(inFlight: ReadonlySet<number> = new Set()): number | undefined {
    const rows = this.open
      .prepare(`select seq, next_attempt_at from (${LANE_HEADS}) order by next_attempt_at, seq`)
      .all();
    for (const row of rows) {
      if (!inFlight.has(Number(row['seq']))) return Number(row['next_attempt_at']);
    }
    return undefined;
  }

  /**
   * Counts the pending intents.
   *
   * @returns the count.
   */
  pendingCount(): number {
    const row = this.open
      .prepare(`select count(*) as n from intents where state = 'pending'`)
      .get();
    return Number(row?.['n'] ?? 0);
  }

  /**
   * Records, durably, that an attempt starts, before its first byte is sent:
   * a crash or a kill during the attempt leaves the count true, and the
   * attempt marked as started ({@link Intent.attemptStartedAt}), so a later
   * answer is known to follow an attempt that may have reached the server.
   *
   * @param seq the intent.
   * @param attempts the attempts made so far, this one included.
   * @param now the current time in milliseconds since the epoch.
   * @param serverTime the server's time now, when known: the intent's
   *   {@link Intent.serverAnchor} on its first attempt only (a later one's
   *   may be after the server's first sight of the key).
   * @param keyLifetimeMs the key lifetime in force now, when known: the
   *   shortest one stays ({@link Intent.keyLifetimeMs}).
   * @throws OutboxError when no pending intent has that number.
   */
  recordAttempt(
    seq: number,
    attempts: number,
    now: number,
    serverTime?: number,
    keyLifetimeMs?: number,
  ): void {
    attemptStarted(this.open, this.file, seq, attempts, now, serverTime, keyLifetimeMs);
  }

  /**
   * Keeps a key lifetime seen without an attempt (a drain held the
   * intent): the shortest stays, as {@link recordAttempt} keeps it.
   *
   * @param seq the intent.
   * @param keyLifetimeMs the lifetime in force now.
   * @param now the current time in milliseconds since the epoch.
   * @throws OutboxError when no pending intent has that number.
   */
  recordKeyLifetime(seq: number, keyLifetimeMs: number, now: number): void {
    keyLifetimeSeen(this.open, this.file, seq, keyLifetimeMs, now);
  }

  /**
   * Records an attempt that is to be repeated with the same key.
   *
   * @param seq the intent.
   * @param attempts the attempts made so far, this one included.
   * @param nextAttemptAt when to try again, in milliseconds since the epoch.
   * @param error what the attempt met.
   * @param options `unmarked`: the answer was a 2xx or a stored status
   *   without `Idempotent-Replay` ({@link Intent.unmarkedAnswer}); default false.
   * @throws OutboxError when no pending intent has that number.
   */
  recordRetry(
    seq: number,
    attempts: number,
    nextAttemptAt: number,
    error: string,
    options: { readonly unmarked?: boolean } = {},
  ): void {
    retryLater(
      this.open,
      this.file,
      seq,
      attempts,
      nextAttemptAt,
      error,
      options.unmarked === true,
    );
  }

  /**
   * Records the final answer of an intent: `done` with a 2xx or a stored
   * error, or `failed` with the answer that made it fail.
   *
   * @param seq the intent.
   * @param record the state, the reason and the answer.
   * @throws OutboxError when no pending intent has that number.
   */
  recordFinal(seq: number, record: FinalRecord): void {
    settled(this.open, this.file, seq, record);
  }

  /**
   * Records that an intent's key is too old to be sent: the server may have
   * forgotten it and would run the request again as new.
   *
   * @param seq the intent.
   * @param now the current time in milliseconds since the epoch.
   * @throws OutboxError when no pending intent has that number.
   */
  recordExpired(seq: number, now: number): void {
    expired(this.open, this.file, seq, now);
  }

  /**
   * Records that a settled intent's final result was printed, so an equal
   * intent is not refused for it unless it may have taken effect
   * (outbox-rows.ts). Nothing is written for a pending intent.
   *
   * @param seq the intent.
   * @param now the current time in milliseconds since the epoch.
   */
  markReported(seq: number, now: number): void {
    reported(this.open, seq, now);
  }

  /**
   * The latest time the outbox has seen (its own records, and server
   * `Date`s given to {@link observeTime}): a key's age counts up to at least
   * this, so a clock stepped back does not make an old key look young.
   *
   * @returns milliseconds since the epoch; 0 before anything was recorded.
   */
  highWater(): number {
    const row = this.open.prepare(`select value from meta where name = 'clock_high_water'`).get();
    const value = Number(row?.['value'] ?? 0);
    return Number.isSafeInteger(value) ? value : 0;
  }

  /**
   * Raises the high-water mark ({@link highWater}) to a later time seen
   * elsewhere, e.g. a server's `Date`; nothing is written otherwise.
   *
   * @param ms the time, in milliseconds since the epoch.
   */
  observeTime(ms: number): void {
    if (Number.isSafeInteger(ms) && ms > this.highWater()) raiseHighWater(this.open, ms);
  }

  /**
   * The principal the outbox belongs to.
   *
   * @returns its id, or undefined before the first contact with the server.
   */
  principal(): string | undefined {
    const row = this.open.prepare(`select value from meta where name = 'principal_id'`).get();
    return row === undefined ? undefined : String(row['value']);
  }

  /**
   * Binds the outbox to the principal of the token in use, on first
   * contact; later, checks that the token is that principal's. Keys belong
   * to a principal: another principal's repeat of a key would run as new.
   *
   * @param principalId the id `GET /api/v1/me` answered.
   * @throws OutboxPrincipalError when the outbox belongs to another principal.
   */
  bindPrincipal(principalId: string): void {
    const bound = this.principal();
    if (bound === principalId) return;
    if (bound !== undefined) {
      throw new OutboxPrincipalError(
        `outbox ${this.file} belongs to principal ${bound}; the token is principal ${principalId}'s: use a token of ${bound}, or another outbox file`,
      );
    }
    this.open.prepare(`insert into meta (name, value) values ('principal_id', ?)`).run(principalId);
  }

  /**
   * Checks the whole file for damage (SQLite's `quick_check`: every page
   * of every table and index is read and its structure checked). About
   * 1.7 us a row (170 ms for 100,000 rows on a machine of the project's
   * kind), so it runs where every row is read anyway (`outbox list`), not
   * at every open; the statements of the sending commands find damage in
   * the pages they read.
   *
   * @throws OutboxDamagedError naming the file and the first problem found.
   */
  check(): void {
    quickCheck(this.open, this.file);
  }

  close(): void {
    this.db?.close();
    this.db = undefined;
  }
}

// Every method of an open outbox turns an error of SQLite (a damaged page,
// an I/O error, a full disk) into an OutboxDamagedError: one line naming
// the file and what to do, exit 4 on the command line, never a stack
// trace. Wrapping the prototype covers each method, one added later too.
for (const name of Object.getOwnPropertyNames(Outbox.prototype)) {
  const descriptor = Object.getOwnPropertyDescriptor(Outbox.prototype, name);
  const method: unknown = descriptor?.value;
  if (name === 'constructor' || descriptor === undefined || typeof method !== 'function') continue;
  const original = method as (this: Outbox, ...args: unknown[]) => unknown;
  Object.defineProperty(Outbox.prototype, name, {
    ...descriptor,
    value: function guarded(this: Outbox, ...args: unknown[]): unknown {
      try {
        return original.apply(this, args);
      } catch (err) {
        throw storageError(this.file, err);
      }
    },
  });
}
