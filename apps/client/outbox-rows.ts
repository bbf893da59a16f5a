/**
 * The outbox's rows: the queries that pick intents (the heads of lanes, an
 * equal intent never reported) and the reading of a row into an
 * {@link Intent}, every column checked, so a row the outbox would not write
 * is refused as corrupt and never sent.
 */
import type { SQLInputValue } from 'node:sqlite';
import { OutboxCorruptError } from './outbox-errors.js';
import {
  METHODS,
  pathProblem,
  type FailureReason,
  type Intent,
  type IntentState,
  type RecordedAnswer,
  type WriteMethod,
} from './outbox-intent.js';
import { UUID_V7 } from './outbox-keys.js';
import { FAILURES } from './outbox-schema.js';

/** A row as node:sqlite reads it. */
export type Row = Record<string, SQLInputValue>;

const STATES: readonly string[] = ['pending', 'done', 'failed'];

/** Pending intents that no earlier pending intent shares a lane with. */
export const LANE_HEADS = `
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
 * and that a new one must not repeat: pending, settled and not reported,
 * or failed in a way that may have taken effect (`outcome_unknown`,
 * `expired`: client.ts `mayHaveTakenEffect`), reported or not, since a
 * rerun of the command that printed "outcome unknown" would otherwise
 * state a second transfer under a new key. Its condition is the partial
 * index `intents_unreported`'s (outbox-schema.ts), so it reads that index,
 * which holds only such rows. A pending one first, then one never
 * reported, then the oldest: an old reported intent of unknown outcome must
 * not hide a newer equal one that is still pending (stated with again),
 * or the refusal would name the old one and a second again would send both.
 * Parameters: operation, path, method, body (null for none).
 */
export const UNREPORTED_EQUAL_SQL = `select * from intents
 where (state = 'pending' or reported_at is null or failure in ('outcome_unknown', 'expired'))
   and operation = ? and path = ? and method = ? and body is ?
 order by state = 'pending' desc, reported_at is null desc, seq limit 1`;

/**
 * Reads a row of `intents`.
 *
 * @param file the outbox's path, for messages.
 * @param row the row.
 * @returns the intent.
 * @throws OutboxCorruptError naming the row and the column that is not as
 *   the outbox writes it.
 */
export function parseRow(file: string, row: Row): Intent {
  const seq = row['seq'];
  const bad = (column: string, why: string): never => {
    throw new OutboxCorruptError(
      `outbox ${file}: row ${typeof seq === 'number' ? String(seq) : '?'} is corrupt: ${column} ${why}; it is not sent: repair or remove the row`,
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
  if (pathProblem(path) !== undefined) bad('path', 'is not a path of the origin without a query');
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
    keyLifetimeMs: row['key_lifetime_ms'] === null ? null : int('key_lifetime_ms'),
    answer,
    finishedAt: row['finished_at'] === null ? null : int('finished_at'),
    reportedAt: row['reported_at'] === null ? null : int('reported_at'),
  };
}
