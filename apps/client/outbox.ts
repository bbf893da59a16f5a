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
 * node:sqlite is loaded when the first outbox is opened (through
 * `process.getBuiltinModule`), not when this module is imported, so a
 * program can filter the ExperimentalWarning some Node.js 24 releases print
 * for it before it appears (see warnings.ts).
 */
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, statSync } from 'node:fs';
import type { DatabaseSync, SQLInputValue } from 'node:sqlite';
import canonicalize from 'canonicalize';
import {
  IntentConflictError,
  OutboxCorruptError,
  OutboxError,
  OutboxLockedError,
  OutboxOpenError,
  OutboxPrincipalError,
  OutboxDamagedError,
  storageError,
} from './outbox-errors.js';
import { FAILURES, prepareSchema } from './outbox-schema.js';

export * from './outbox-errors.js';

/** Where an intent stands. */
export type IntentState = 'pending' | 'done' | 'failed';

/**
 * Why a failed intent failed: `key_reuse` (the server answered `422
 * idempotency_key_reuse`: the key was used for another request, a bug of the
 * caller), `expired` (the key became older than the server keeps keys before
 * it could be sent; it was not sent again), `unexpected_answer` (an answer
 * the API does not give to such a request, e.g. 405 or 428),
 * `outcome_unknown` (a 2xx or an error the server would store, 400, 403,
 * 404, 409, 410, 412, 413, 415 or 422, but without `Idempotent-Replay`
 * twice in a row, so not the key's stored answer: a gateway's, or a
 * refusal before the key was looked up; or an answer the API never gives,
 * after an earlier attempt that may have reached the server; whether the
 * intent took effect is not known).
 */
export type FailureReason = 'key_reuse' | 'expired' | 'unexpected_answer' | 'outcome_unknown';

/** The HTTP methods of writes. */
export type WriteMethod = 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** An answer as the outbox keeps it: the status, a few headers and the body's exact text. */
export interface RecordedAnswer {
  /** The HTTP status. */
  readonly status: number;
  /** Whether the server sent `Idempotent-Replay: true` (the stored answer of an earlier attempt). */
  readonly replayed: boolean;
  /**
   * Whether the answer carried `Idempotent-Replay` (`true` or `false`): the
   * key's stored answer, given first or again. Without it the answer was
   * not stored under the key (docs/api/README.md, "Which answers are
   * stored"). Null: not known, for an answer recorded by a client of schema
   * version 1, which kept only whether it was a replay.
   */
  readonly marked: boolean | null;
  /** The headers kept, by lower-case name: location, etag, content-type, correlation-id. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body exactly as received (JSON text for every answer of this API). */
  readonly body: string;
}

/** One intended write and what became of it. */
export interface Intent {
  /** Its place in the outbox: intents are stated, and sent per lane, in this order. */
  readonly seq: number;
  /** Its Idempotency-Key, a lower-case UUIDv7, fixed when it was stated. */
  readonly key: string;
  /** What it does, e.g. the OpenAPI operationId `createTransfer`. */
  readonly operation: string;
  /** The HTTP method. */
  readonly method: WriteMethod;
  /** The request path from the origin, e.g. `/api/v1/transfers`. */
  readonly path: string;
  /** The request body exactly as sent (RFC 8785 JSON), or null for none. */
  readonly body: string | null;
  /** The lanes it is ordered in (see {@link NewIntent.lanes}). */
  readonly lanes: readonly string[];
  /** When it was stated, in milliseconds since the epoch (its key's age counts from here). */
  readonly createdAt: number;
  /** pending, done (a final answer), or failed (see {@link failure}). */
  readonly state: IntentState;
  /** Why it failed, for state `failed`; otherwise null. */
  readonly failure: FailureReason | null;
  /**
   * How many attempts were started so far: each is counted, durably, before
   * its first byte is sent, so one cut off by a crash, a kill or the
   * caller's abort is counted too (its bytes may have left).
   */
  readonly attempts: number;
  /** When a pending intent may be sent next, in milliseconds since the epoch. */
  readonly nextAttemptAt: number;
  /**
   * When the attempt in flight started, in milliseconds since the epoch:
   * recorded before its first byte is sent, cleared when it ends. On an
   * intent no process is sending, it names an attempt cut off (a crash, a
   * kill) that may have reached the server. Null when none is in flight.
   */
  readonly attemptStartedAt: number | null;
  /**
   * The server's time (its `Date`, carried forward on the monotonic clock)
   * seen before the intent's first attempt, in milliseconds since the
   * epoch: its key's age on the server's clock counts from here. Null when
   * no server time was known before an attempt (or the row predates
   * schema version 3).
   */
  readonly serverAnchor: number | null;
  /** What the last unsuccessful attempt met, e.g. `503 service_unavailable` or `ECONNREFUSED`. */
  readonly lastError: string | null;
  /**
   * Whether the last attempt's answer was unmarked: a 2xx or a status the
   * server stores, without `Idempotent-Replay`, so not known to be the
   * key's answer, and repeated once. A second unmarked answer in a row is
   * an unknown outcome. False for a new intent and after any other retry.
   */
  readonly unmarkedAnswer: boolean;
  /**
   * The final answer, for `done` and for `failed` with key_reuse,
   * unexpected_answer or outcome_unknown.
   */
  readonly answer: RecordedAnswer | null;
  /** When it reached its final state, in milliseconds since the epoch. */
  readonly finishedAt: number | null;
  /**
   * When the command that stated it printed its final result, in
   * milliseconds since the epoch (see {@link Outbox.markReported}). Null
   * while pending, and for a settled intent whose result no command printed
   * (its process was killed after the answer was recorded, or a library
   * caller settled it).
   */
  readonly reportedAt: number | null;
}

/** What a caller states to make an intent. */
export interface NewIntent {
  /** What it does, e.g. `createTransfer`. */
  readonly operation: string;
  /** The HTTP method. */
  readonly method: WriteMethod;
  /**
   * The path from the origin, starting with `/` but not `//`, without a
   * query (keyed requests take none) and without control characters.
   */
  readonly path: string;
  /** The JSON body, or undefined for none; it is kept and sent in its RFC 8785 form. */
  readonly body?: unknown;
  /**
   * The lanes it is ordered in: of the intents that share a lane, one is sent
   * at a time, in the order they were stated. An intent with no lanes is
   * independent of all others. Default: `['outbox']`, one order for
   * everything.
   */
  readonly lanes?: readonly string[];
  /**
   * Its Idempotency-Key, for a caller that keeps its own ids (a UUIDv7);
   * default: a new one. A key already in the outbox for the same request
   * names that intent; for another request it is refused.
   */
  readonly key?: string;
}

/** What the final state of an intent is recorded with. */
export interface FinalRecord {
  /** The attempts made, this one included. */
  readonly attempts: number;
  /** `done` or `failed`. */
  readonly state: 'done' | 'failed';
  /** Why, for `failed`; null for `done`. */
  readonly failure: FailureReason | null;
  /** The answer. */
  readonly answer: RecordedAnswer;
  /** The current time in milliseconds since the epoch. */
  readonly now: number;
  /**
   * A note on the answer, kept as the intent's last error, e.g. that its
   * body was too large to keep; default none (the last error is left).
   */
  readonly note?: string;
}

/** Options of {@link Outbox.open}. */
export interface OutboxOptions {
  /** The clock stamping new intents, in milliseconds since the epoch; default `Date.now`. */
  readonly clock?: () => number;
  /**
   * Whether a missing file is made into a new outbox; default true. False
   * for readers such as `outbox list`: a missing or empty file is refused and
   * left as it was.
   */
  readonly create?: boolean;
}

/** The storage settings of an open outbox, as SQLite reports them. */
export interface StorageSettings {
  /** `wal`. */
  readonly journalMode: string;
  /** `full`. */
  readonly synchronous: string;
  /** `exclusive`. */
  readonly lockingMode: string;
  /** Whether foreign keys are enforced (true once open). */
  readonly foreignKeys: boolean;
}

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const METHODS: readonly string[] = ['POST', 'PUT', 'PATCH', 'DELETE'];
/**
 * A path that a URL parser reads as naming a host (`//host/...`, and
 * `/\host/...`, as a backslash is a slash in http URLs): sent, the token
 * would go to that host (L5).
 */
const OTHER_HOST = /^\/[/\\]/;
/**
 * A control character (C0 or DEL): a URL parser drops tab, CR and LF, so
 * `/\t/host/...` reads as `//host/...`, another host, which would get the
 * token (F2); none belongs in a path of this API.
 */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;
const STATES: readonly string[] = ['pending', 'done', 'failed'];
const SYNCHRONOUS = ['off', 'normal', 'full', 'extra'];
/** SQLite's result codes met when opening (sqlite3.h). */
const SQLITE_BUSY = 5;
const SQLITE_LOCKED = 6;
const SQLITE_CORRUPT = 11;
const SQLITE_NOTADB = 26;

/** Pending intents that no earlier pending intent shares a lane with. */
const LANE_HEADS = `
select * from intents i
 where i.state = 'pending'
   and not exists (
     select 1 from intent_lanes a
       join intent_lanes b on b.lane = a.lane and b.seq < a.seq
       join intents j on j.seq = b.seq and j.state = 'pending'
      where a.seq = i.seq)`;

/**
 * The first intent that would send the same request as a new one (same
 * operation, path, method and body, the body in RFC 8785 form as stored)
 * and whose result no command printed: pending, or settled and not
 * reported. Its condition is the partial index `intents_unreported`'s
 * (outbox-schema.ts), so it reads that index, which holds only such rows.
 * Parameters: operation, path, method, body (null for none).
 */
export const UNREPORTED_EQUAL_SQL = `select * from intents
 where (state = 'pending' or reported_at is null)
   and operation = ? and path = ? and method = ? and body is ?
 order by seq limit 1`;

/**
 * Makes a new key: a UUIDv7 (RFC 9562), 48 bits of milliseconds then random
 * bits, in lower case.
 *
 * @param clock the time source in milliseconds since the epoch; default `Date.now`.
 * @returns the key.
 */
export function newKey(clock: () => number = Date.now): string {
  const b = randomBytes(16);
  let ms = clock();
  for (let i = 5; i >= 0; i -= 1) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = ((b[6] ?? 0) & 0x0f) | 0x70;
  b[8] = ((b[8] ?? 0) & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * The time a UUIDv7 key was made: its first 48 bits, milliseconds since
 * the epoch.
 *
 * @param key a UUIDv7 in canonical form.
 * @returns its time in milliseconds since the epoch.
 */
export function keyTime(key: string): number {
  return Number.parseInt(key.replace(/-/g, '').slice(0, 12), 16);
}

/**
 * Checks a key given by a caller.
 *
 * @param key the key.
 * @returns it in lower case.
 * @throws RangeError when it is not a UUIDv7 in canonical form.
 */
export function checkKey(key: string): string {
  const lower = key.toLowerCase();
  if (!UUID_V7.test(lower)) {
    throw new RangeError(`the key must be a UUIDv7 in canonical form, got "${key}"`);
  }
  return lower;
}

type Row = Record<string, SQLInputValue>;

function sqliteErrorCode(err: unknown): number | undefined {
  const code = (err as { errcode?: unknown }).errcode;
  return typeof code === 'number' ? code : undefined;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Makes a missing outbox file, empty, readable and writable by its owner
 * alone (0600), before SQLite opens it: it holds request bodies, answers
 * and the principal's id, and SQLite gives the files it keeps beside it
 * (`-wal`, `-shm`) the mode of the database file. An existing file is left
 * as it is.
 *
 * @param file the outbox's path.
 * @throws OutboxOpenError when the file cannot be made (e.g. its folder
 *   is missing).
 */
function createPrivate(file: string): void {
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'EEXIST') return;
    throw new OutboxOpenError(`cannot open outbox ${file}: ${message(err)}`);
  }
  closeSync(fd);
}

/**
 * Rolls back after a failed statement, quietly: when the failure was the
 * file's (a damaged page, an I/O error), the rollback may fail as well,
 * and the first error is the one to report. SQLite rolls back on its own
 * what a failed rollback leaves.
 */
function rollback(db: DatabaseSync): void {
  try {
    if (db.isTransaction) db.exec('rollback');
  } catch {
    // The statement's own error is thrown by the caller.
  }
}

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
   * Opens (or creates) an outbox file and takes its lock; a file of schema
   * version 1, 2 or 3 is migrated to version 4 in one transaction.
   *
   * @param file the file's path; a new file is created (its folder must
   *   exist) unless `options.create` is false.
   * @param options the clock stamping new intents, and whether to create.
   * @returns the open outbox; close it when done.
   * @throws OutboxLockedError when another connection holds the file.
   * @throws OutboxDamagedError when a page read while opening is damaged.
   * @throws OutboxOpenError when the file cannot be opened, is not a SQLite
   *   database, holds other tables, was written by a newer client, or is of
   *   an older schema version and its migration to version 4 failed (it is
   *   left as it was); when it is `:memory:` or a `file:` URI, or its journal mode does not become WAL
   *   (an in-memory or temporary database); when `options.create` is false
   *   and the file is missing or empty.
   */
  static open(file: string, options: OutboxOptions = {}): Outbox {
    if (file === ':memory:') {
      throw new OutboxOpenError(
        `cannot open outbox ${file}: an outbox in memory is lost with the process; give a file`,
      );
    }
    if (/^file:/i.test(file)) {
      // node:sqlite reads such a name as a URI, whose options (nolock=1,
      // mode=memory) would undo the one-writer lock or the durability.
      throw new OutboxOpenError(
        `cannot open outbox ${file}: a file: URI is not a file path; write ./${file} for a file of that name`,
      );
    }
    const create = options.create ?? true;
    if (!create) {
      // Before SQLite sees it: opening makes a missing file, and WAL mode
      // writes a header into an empty one.
      const stat = statSync(file, { throwIfNoEntry: false });
      if (stat === undefined) {
        throw new OutboxOpenError(`cannot open outbox ${file}: the file does not exist`);
      }
      if (stat.isFile() && stat.size === 0) {
        throw new OutboxOpenError(`cannot open outbox ${file}: it is empty, not an outbox`);
      }
    }
    // An empty name is SQLite's temporary database, refused below by its
    // journal mode; there is no file to make.
    if (create && file !== '') createPrivate(file);
    const { DatabaseSync: Database } = process.getBuiltinModule('node:sqlite');
    let db: DatabaseSync;
    try {
      db = new Database(file, { timeout: 0, enableForeignKeyConstraints: true });
    } catch (err) {
      throw new OutboxOpenError(`cannot open outbox ${file}: ${message(err)}`);
    }
    try {
      // Exclusive locking first: the lock is taken by the first write below
      // and kept until close, and WAL then needs no shared-memory file.
      db.exec('pragma locking_mode = exclusive');
      const mode = db.prepare('pragma journal_mode = wal').get()?.['journal_mode'];
      if (typeof mode !== 'string' || mode.toLowerCase() !== 'wal') {
        throw new OutboxOpenError(
          `cannot open outbox ${file === '' ? '""' : file}: its journal mode is ${String(mode)}, not wal: an outbox is a file on a local file system (an in-memory or temporary database is lost with the process)`,
        );
      }
      db.exec('pragma synchronous = full');
      // Off for a migration (outbox-schema.ts), which moves the table the
      // lanes refer to; the pragma does nothing inside a transaction.
      db.exec('pragma foreign_keys = off');
      db.exec('begin immediate');
      try {
        prepareSchema(db, file, create);
        // The mark of time, for a file that has rows but no mark yet (one
        // of version 1): the latest time its rows recorded.
        db.exec(`insert or ignore into meta (name, value)
                 select 'clock_high_water', cast(max(coalesce(max(created_at), 0),
                        coalesce(max(finished_at), 0), coalesce(max(attempt_started_at), 0)) as text)
                   from intents`);
        db.exec('commit');
      } catch (err) {
        rollback(db);
        throw err;
      }
      db.exec('pragma foreign_keys = on');
    } catch (err) {
      db.close();
      if (err instanceof OutboxError) throw err;
      const code = sqliteErrorCode(err);
      if (code === SQLITE_BUSY || code === SQLITE_LOCKED) {
        throw new OutboxLockedError(
          `outbox ${file} is in use by another process or connection (one writer per outbox file)`,
        );
      }
      if (code === SQLITE_NOTADB) {
        throw new OutboxOpenError(
          `cannot open outbox ${file}: the file is not a database (or its header is damaged): if it is an outbox, restore it from a copy, or move it aside to start a new one`,
        );
      }
      if (code !== undefined && (code & 0xff) === SQLITE_CORRUPT) throw storageError(file, err);
      throw new OutboxOpenError(`cannot open outbox ${file}: ${message(err)}`);
    }
    return new Outbox(file, db, options.clock ?? Date.now);
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
    const db = this.open;
    const one = (pragma: string): string => {
      const row = db.prepare(`pragma ${pragma}`).get();
      const value = row === undefined ? undefined : Object.values(row)[0];
      return typeof value === 'string' || typeof value === 'number' ? String(value) : '';
    };
    const sync = one('synchronous');
    return {
      journalMode: one('journal_mode').toLowerCase(),
      synchronous: SYNCHRONOUS[Number(sync)] ?? sync,
      lockingMode: one('locking_mode').toLowerCase(),
      foreignKeys: one('foreign_keys') === '1',
    };
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
    const db = this.open;
    const key = intent.key === undefined ? newKey(this.clock) : checkKey(intent.key);
    if (!METHODS.includes(intent.method)) {
      throw new RangeError(`method must be one of ${METHODS.join(', ')}, got "${intent.method}"`);
    }
    if (!intent.path.startsWith('/')) {
      throw new RangeError(`path must start with "/", got "${intent.path}"`);
    }
    if (CONTROL.test(intent.path)) {
      throw new RangeError(
        `path must not hold a control character (a URL parser drops tab, CR and LF, so it could name another host, which would get the token); got ${JSON.stringify(intent.path)}`,
      );
    }
    if (OTHER_HOST.test(intent.path)) {
      throw new RangeError(
        `path must not start with "//" (or "/\\"): it names another host, which would get the token; got "${intent.path}"`,
      );
    }
    if (intent.path.includes('?') || intent.path.includes('#')) {
      throw new RangeError(`path may not carry a query or fragment (keyed requests take none)`);
    }
    const lanes = [...new Set(intent.lanes ?? ['outbox'])];
    if (lanes.some((l) => l === '')) throw new RangeError('a lane must not be empty');
    const body = intent.body === undefined ? null : (canonicalize(intent.body) ?? null);
    db.exec('begin immediate');
    try {
      const existing = db.prepare('select * from intents where key = ?').get(key);
      if (existing !== undefined) {
        const found = this.parse(existing);
        if (found.method !== intent.method || found.path !== intent.path || found.body !== body) {
          throw new IntentConflictError(
            `key ${key} is in outbox ${this.file} already, for another request (intent ${String(found.seq)}: ${found.method} ${found.path})`,
          );
        }
        db.exec('commit');
        return { intent: found, created: false };
      }
      const inserted = db
        .prepare(
          `insert into intents (key, operation, method, path, body, lanes, created_at)
           values (?, ?, ?, ?, ?, ?, ?) returning *`,
        )
        .get(
          key,
          intent.operation,
          intent.method,
          intent.path,
          body,
          JSON.stringify(lanes),
          this.clock(),
        ) as Row;
      const lane = db.prepare('insert into intent_lanes (lane, seq) values (?, ?)');
      for (const l of lanes) lane.run(l, inserted['seq'] ?? null);
      this.raiseHighWater(Number(inserted['created_at']));
      db.exec('commit');
      return { intent: this.parse(inserted), created: true };
    } catch (err) {
      rollback(db);
      throw err;
    }
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
    const body = wanted.body === undefined ? null : (canonicalize(wanted.body) ?? null);
    const row = this.open
      .prepare(UNREPORTED_EQUAL_SQL)
      .get(wanted.operation, wanted.path, wanted.method, body);
    return row === undefined ? undefined : this.parse(row);
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
    return row === undefined ? undefined : this.parse(row);
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
    return rows.map((r) => this.parse(r));
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
      out.push(this.parse(row));
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
   * @param serverTime the server's time now, as far as it is known; kept
   *   as the intent's {@link Intent.serverAnchor} when this is its first
   *   attempt (no attempt counted or cut off before) and it has none yet:
   *   a server time seen at a later attempt may be after the server's first
   *   sight of the key, and would understate its age (F6).
   * @throws OutboxError when no pending intent has that number.
   */
  recordAttempt(seq: number, attempts: number, now: number, serverTime?: number): void {
    this.update(
      seq,
      `update intents set attempts = ?, attempt_started_at = ?,
              server_anchor = case when attempts = 0 and attempt_started_at is null
                                   then coalesce(server_anchor, ?) else server_anchor end
        where seq = ? and state = 'pending'`,
      [attempts, now, serverTime ?? null, seq],
      now,
    );
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
    this.update(
      seq,
      `update intents set attempts = ?, next_attempt_at = ?, last_error = ?, unmarked = ?,
              attempt_started_at = null
        where seq = ? and state = 'pending'`,
      [attempts, nextAttemptAt, error, options.unmarked === true ? 1 : 0, seq],
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
    const { answer } = record;
    this.update(
      seq,
      `update intents set state = ?, failure = ?, attempts = ?, attempt_started_at = null,
              status = ?, replayed = ?, marked = ?, answer_headers = ?, answer_body = ?,
              finished_at = ?, last_error = coalesce(?, last_error)
        where seq = ? and state = 'pending'`,
      [
        record.state,
        record.failure,
        record.attempts,
        answer.status,
        answer.replayed ? 1 : 0,
        answer.marked === null ? null : answer.marked ? 1 : 0,
        JSON.stringify(answer.headers),
        answer.body,
        record.now,
        record.note ?? null,
        seq,
      ],
      record.now,
    );
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
    this.update(
      seq,
      `update intents set state = 'failed', failure = 'expired', finished_at = ?,
              attempt_started_at = null
        where seq = ? and state = 'pending'`,
      [now, seq],
      now,
    );
  }

  /**
   * Records that the final result of a settled intent was printed to the
   * caller, so an equal command run again is not refused for it (the
   * command line refuses an equal intent that is pending, or settled but
   * not reported). Nothing is written for a pending intent.
   *
   * @param seq the intent.
   * @param now the current time in milliseconds since the epoch.
   */
  markReported(seq: number, now: number): void {
    this.open
      .prepare(
        `update intents set reported_at = ?
          where seq = ? and state <> 'pending' and reported_at is null`,
      )
      .run(now, seq);
  }

  /**
   * The latest time the outbox has seen: the largest clock value it recorded
   * (an intent stated, an attempt started, a final state) and the latest
   * server `Date` given to {@link observeTime}. A key's age counts up to at
   * least this time, so a clock stepped back does not make an old key look
   * young.
   *
   * @returns milliseconds since the epoch; 0 before anything was recorded.
   */
  highWater(): number {
    const row = this.open.prepare(`select value from meta where name = 'clock_high_water'`).get();
    const value = Number(row?.['value'] ?? 0);
    return Number.isSafeInteger(value) ? value : 0;
  }

  /**
   * Raises the high-water mark of time ({@link highWater}) to a time seen
   * elsewhere, e.g. a server's `Date` header, when it is later. Nothing is
   * written otherwise.
   *
   * @param ms the time, in milliseconds since the epoch.
   */
  observeTime(ms: number): void {
    if (Number.isSafeInteger(ms) && ms > this.highWater()) this.raiseHighWater(ms);
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
    const rows = this.open.prepare('pragma quick_check(1)').all();
    const first = rows[0] === undefined ? undefined : Object.values(rows[0])[0];
    if (first !== 'ok') {
      // SQLite's report spans lines ("*** in database main ***", then
      // the pages); the message stays one line.
      const found = String(first)
        .split('\n')
        .filter((l) => l !== '' && !l.startsWith('***'))
        .join('; ');
      throw new OutboxDamagedError(
        `outbox ${this.file} is damaged (${found}): nothing more is sent from it; restore it from a copy, or move it aside (with its -wal file) and check its pending intents by hand before stating them again`,
      );
    }
  }

  /** Closes the file and drops its lock. Closing twice does nothing. */
  close(): void {
    this.db?.close();
    this.db = undefined;
  }

  /**
   * One change of a pending intent, and the time it records raised into the
   * high-water mark, in one transaction.
   */
  private update(seq: number, sql: string, params: SQLInputValue[], now?: number): void {
    const db = this.open;
    db.exec('begin immediate');
    try {
      const result = db.prepare(sql).run(...params);
      if (result.changes === 0) {
        throw new OutboxError(`outbox ${this.file} has no pending intent ${String(seq)}`);
      }
      if (now !== undefined) this.raiseHighWater(now);
      db.exec('commit');
    } catch (err) {
      rollback(db);
      throw err;
    }
  }

  private raiseHighWater(ms: number): void {
    this.open
      .prepare(
        `insert into meta (name, value) values ('clock_high_water', ?)
           on conflict (name) do update set value = excluded.value
            where cast(excluded.value as integer) > cast(meta.value as integer)`,
      )
      .run(String(ms));
  }

  private parse(row: Row): Intent {
    const seq = row['seq'];
    const bad = (column: string, why: string): never => {
      throw new OutboxCorruptError(
        `outbox ${this.file}: row ${typeof seq === 'number' ? String(seq) : '?'} is corrupt: ${column} ${why}; it is not sent: repair or remove the row`,
      );
    };
    const int = (column: string): number => {
      const v = row[column];
      return typeof v === 'number' && Number.isInteger(v) ? v : bad(column, 'is not an integer');
    };
    const text = (column: string): string => {
      const v = row[column];
      return typeof v === 'string' ? v : bad(column, 'is not text');
    };
    const json = (column: string, value: string): unknown => {
      try {
        return JSON.parse(value) as unknown;
      } catch {
        return bad(column, 'is not JSON');
      }
    };
    if (typeof seq !== 'number') return bad('seq', 'is not an integer');
    const key = text('key');
    if (!UUID_V7.test(key)) bad('key', 'is not a lower-case UUIDv7');
    const method = text('method');
    if (!METHODS.includes(method)) bad('method', `is not one of ${METHODS.join(', ')}`);
    const path = text('path');
    if (
      !path.startsWith('/') ||
      path.includes('?') ||
      OTHER_HOST.test(path) ||
      CONTROL.test(path)
    ) {
      bad('path', 'is not a path of the origin without a query');
    }
    const rawBody = row['body'];
    let body: string | null = null;
    if (rawBody !== null) {
      body = text('body');
      json('body', body);
    }
    const lanes = json('lanes', text('lanes'));
    if (!Array.isArray(lanes) || !lanes.every((l) => typeof l === 'string' && l !== '')) {
      bad('lanes', 'is not a list of lane names');
    }
    const state = text('state');
    if (!STATES.includes(state)) bad('state', `is not one of ${STATES.join(', ')}`);
    const failure = row['failure'] === null ? null : text('failure');
    if (failure !== null && !FAILURES.includes(failure)) bad('failure', 'is not a known reason');
    let answer: RecordedAnswer | null = null;
    if (row['status'] !== null) {
      const headers = json('answer_headers', text('answer_headers'));
      if (
        typeof headers !== 'object' ||
        headers === null ||
        Array.isArray(headers) ||
        !Object.values(headers).every((v) => typeof v === 'string')
      ) {
        bad('answer_headers', 'is not an object of header values');
      }
      answer = {
        status: int('status'),
        replayed: int('replayed') === 1,
        marked: row['marked'] === null ? null : int('marked') === 1,
        headers: headers as Record<string, string>,
        body: text('answer_body'),
      };
    }
    return {
      seq,
      key,
      operation: text('operation'),
      method: method as WriteMethod,
      path,
      body,
      lanes: lanes as string[],
      createdAt: int('created_at'),
      state: state as IntentState,
      failure: failure as FailureReason | null,
      attempts: int('attempts'),
      nextAttemptAt: int('next_attempt_at'),
      attemptStartedAt: row['attempt_started_at'] === null ? null : int('attempt_started_at'),
      serverAnchor: row['server_anchor'] === null ? null : int('server_anchor'),
      lastError: row['last_error'] === null ? null : text('last_error'),
      unmarkedAnswer: int('unmarked') === 1,
      answer,
      finishedAt: row['finished_at'] === null ? null : int('finished_at'),
      reportedAt: row['reported_at'] === null ? null : int('reported_at'),
    };
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
