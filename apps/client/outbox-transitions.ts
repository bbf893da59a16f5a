/**
 * The changes of state of an intent, each in one write transaction with
 * the time it records raised into the high-water mark: it is stated
 * (checked, and its lanes recorded), an attempt starts (counted before its first byte leaves), it is to
 * be repeated, it settles, its key expired; and a settled intent's result
 * was reported. Each refuses an intent that is not pending.
 */
import type { DatabaseSync, SQLInputValue } from 'node:sqlite';
import { IntentConflictError, OutboxError } from './outbox-errors.js';
import {
  METHODS,
  canonicalBody,
  pathProblem,
  type FinalRecord,
  type Intent,
  type NewIntent,
} from './outbox-intent.js';
import { checkKey, newKey } from './outbox-keys.js';
import { rollback } from './outbox-open.js';
import { parseRow, type Row } from './outbox-rows.js';

/**
 * Raises the high-water mark of time to `ms` when it is later.
 *
 * @param db the open database.
 * @param ms the time, in milliseconds since the epoch.
 */
export function raiseHighWater(db: DatabaseSync, ms: number): void {
  db.prepare(
    `insert into meta (name, value) values ('clock_high_water', ?)
       on conflict (name) do update set value = excluded.value
        where cast(excluded.value as integer) > cast(meta.value as integer)`,
  ).run(String(ms));
}

/**
 * One change of a pending intent, and the time it records raised into the
 * high-water mark, in one transaction.
 *
 * @throws OutboxError when no pending intent has that number.
 */
function change(
  db: DatabaseSync,
  file: string,
  seq: number,
  sql: string,
  params: SQLInputValue[],
  now?: number,
): void {
  db.exec('begin immediate');
  try {
    const result = db.prepare(sql).run(...params);
    if (result.changes === 0) {
      throw new OutboxError(`outbox ${file} has no pending intent ${String(seq)}`);
    }
    if (now !== undefined) raiseHighWater(db, now);
    db.exec('commit');
  } catch (err) {
    rollback(db);
    throw err;
  }
}

/**
 * An attempt starts; see {@link Outbox.recordAttempt}.
 *
 * @param db the open database.
 * @param file the file's path, for messages.
 * @param seq the intent.
 * @param attempts the attempts made so far, this one included.
 * @param now the current time in milliseconds since the epoch.
 * @param serverTime the server's time now, when known.
 * @param keyLifetimeMs the key lifetime in force now, when known; the
 *   intent keeps the shortest it was attempted under.
 * @throws OutboxError when no pending intent has that number.
 */
export function attemptStarted(
  db: DatabaseSync,
  file: string,
  seq: number,
  attempts: number,
  now: number,
  serverTime: number | undefined,
  keyLifetimeMs?: number,
): void {
  change(
    db,
    file,
    seq,
    `update intents set attempts = ?, attempt_started_at = ?,
            server_anchor = case when attempts = 0 and attempt_started_at is null
                                 then coalesce(server_anchor, ?) else server_anchor end,
            key_lifetime_ms = min(coalesce(key_lifetime_ms, ?), coalesce(?, key_lifetime_ms))
      where seq = ? and state = 'pending'`,
    [attempts, now, serverTime ?? null, keyLifetimeMs ?? null, keyLifetimeMs ?? null, seq],
    now,
  );
}

/**
 * A key lifetime seen for an intent that was attempted, without a new
 * attempt; see {@link Outbox.recordKeyLifetime}.
 *
 * @param db the open database.
 * @param file the file's path, for messages.
 * @param seq the intent.
 * @param keyLifetimeMs the lifetime in force now.
 * @param now the current time in milliseconds since the epoch.
 * @throws OutboxError when no pending intent has that number.
 */
export function keyLifetimeSeen(
  db: DatabaseSync,
  file: string,
  seq: number,
  keyLifetimeMs: number,
  now: number,
): void {
  change(
    db,
    file,
    seq,
    `update intents set key_lifetime_ms = min(coalesce(key_lifetime_ms, ?), ?)
      where seq = ? and state = 'pending'`,
    [keyLifetimeMs, keyLifetimeMs, seq],
    now,
  );
}

/**
 * An attempt is to be repeated; see {@link Outbox.recordRetry}.
 *
 * @param db the open database.
 * @param file the file's path, for messages.
 * @param seq the intent.
 * @param attempts the attempts made so far, this one included.
 * @param nextAttemptAt when to try again, in milliseconds since the epoch.
 * @param error what the attempt met.
 * @param unmarked whether its answer was unmarked.
 * @throws OutboxError when no pending intent has that number.
 */
export function retryLater(
  db: DatabaseSync,
  file: string,
  seq: number,
  attempts: number,
  nextAttemptAt: number,
  error: string,
  unmarked: boolean,
): void {
  change(
    db,
    file,
    seq,
    `update intents set attempts = ?, next_attempt_at = ?, last_error = ?, unmarked = ?,
            attempt_started_at = null
      where seq = ? and state = 'pending'`,
    [attempts, nextAttemptAt, error, unmarked ? 1 : 0, seq],
  );
}

/**
 * An intent settles; see {@link Outbox.recordFinal}.
 *
 * @param db the open database.
 * @param file the file's path, for messages.
 * @param seq the intent.
 * @param record the state, the reason and the answer.
 * @throws OutboxError when no pending intent has that number.
 */
export function settled(db: DatabaseSync, file: string, seq: number, record: FinalRecord): void {
  const { answer } = record;
  change(
    db,
    file,
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
 * An intent's key is too old to send; see {@link Outbox.recordExpired}.
 *
 * @param db the open database.
 * @param file the file's path, for messages.
 * @param seq the intent.
 * @param now the current time in milliseconds since the epoch.
 * @throws OutboxError when no pending intent has that number.
 */
export function expired(db: DatabaseSync, file: string, seq: number, now: number): void {
  change(
    db,
    file,
    seq,
    `update intents set state = 'failed', failure = 'expired', finished_at = ?,
            attempt_started_at = null
      where seq = ? and state = 'pending'`,
    [now, seq],
    now,
  );
}

/**
 * A settled intent's result was reported; see {@link Outbox.markReported}.
 * Nothing is written for a pending or reported intent.
 *
 * @param db the open database.
 * @param seq the intent.
 * @param now the current time in milliseconds since the epoch.
 */
export function reported(db: DatabaseSync, seq: number, now: number): void {
  db.prepare(
    `update intents set reported_at = ?
      where seq = ? and state <> 'pending' and reported_at is null`,
  ).run(now, seq);
}

/**
 * States an intent; see {@link Outbox.enqueue}, whose contract this is.
 *
 * @param db the open database.
 * @param file the file's path, for messages.
 * @param intent what to send and how to order it.
 * @param clock the clock stamping it.
 * @returns the intent, and whether it is new.
 * @throws IntentConflictError, RangeError as {@link Outbox.enqueue} says.
 */
export function stated(
  db: DatabaseSync,
  file: string,
  intent: NewIntent,
  clock: () => number,
): { intent: Intent; created: boolean } {
  const key = intent.key === undefined ? newKey(clock) : checkKey(intent.key);
  if (!METHODS.includes(intent.method)) {
    throw new RangeError(`method must be one of ${METHODS.join(', ')}, got "${intent.method}"`);
  }
  const problem = pathProblem(intent.path);
  if (problem !== undefined) throw new RangeError(problem);
  const lanes = [...new Set(intent.lanes ?? ['outbox'])];
  if (lanes.some((l) => l === '')) throw new RangeError('a lane must not be empty');
  const body = canonicalBody(intent);
  db.exec('begin immediate');
  try {
    const existing = db.prepare('select * from intents where key = ?').get(key);
    if (existing !== undefined) {
      const found = parseRow(file, existing);
      if (found.method !== intent.method || found.path !== intent.path || found.body !== body) {
        throw new IntentConflictError(
          `key ${key} is in outbox ${file} already, for another request (intent ${String(found.seq)}: ${found.method} ${found.path})`,
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
        clock(),
      ) as Row;
    const lane = db.prepare('insert into intent_lanes (lane, seq) values (?, ?)');
    for (const l of lanes) lane.run(l, inserted['seq'] ?? null);
    raiseHighWater(db, Number(inserted['created_at']));
    db.exec('commit');
    return { intent: parseRow(file, inserted), created: true };
  } catch (err) {
    rollback(db);
    throw err;
  }
}
