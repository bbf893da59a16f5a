/**
 * Adding a job from a use case: through the ambient transaction of its unit
 * of work, so the job exists only if everything else the use case wrote
 * commits with it.
 */
import type { PgDatabase } from '../pg/uow.js';
import {
  assertJobKey,
  assertQueueName,
  assertTaskIdentifier,
  type TaskDescriptor,
} from './task.js';

/** How a job is added; every field is optional. */
export interface AddJobSpec {
  /**
   * The queue. Defaults to the task's queue when a task descriptor is given;
   * with a bare identifier and no queue the job joins none (runs in parallel).
   */
  readonly queueName?: string;
  /** Not before this time (default: now, by the database clock). */
  readonly runAt?: Date;
  /**
   * A key: adding a job with a key a waiting job already has replaces that
   * job (payload, run time, queue) instead of adding a second one; a running
   * job with that key keeps running but loses the key and its retries, and
   * the new job is added beside it.
   */
  readonly jobKey?: string;
  /** Attempts before the job is given up, 1 to 32767 (default 25). */
  readonly maxAttempts?: number;
}

/** A task to add a job for: its descriptor, or its identifier when the task belongs to another module. */
export type JobTarget = string | Pick<TaskDescriptor, 'identifier' | 'queue'>;

// graphile-worker stores max_attempts as a smallint.
const MAX_ATTEMPTS_LIMIT = 32767;

/**
 * Adds a job in the caller's unit of work with `graphile_worker.add_job`.
 *
 * The job is visible to workers only after the transaction commits; a
 * rollback (or a retry of the unit of work) leaves no job behind, so the
 * effect it stands for happens at most once per committed use case.
 *
 * @param db the database whose ambient transaction is used.
 * @param task the task descriptor, or a task identifier (`module:action`).
 * @param payload JSON-serializable data for the handler (`{}` when undefined).
 * @param spec queue, run time, job key and attempts.
 * @returns the job's id, a bigint as a decimal string.
 * @throws TransactionRequiredError outside a unit of work.
 * @throws TypeError on a bad identifier, queue, job key, run time or payload,
 *   or a queue that is not the given task's.
 * @throws RangeError when maxAttempts is not an integer from 1 to 32767.
 */
export async function addJob(
  db: PgDatabase,
  task: JobTarget,
  payload: unknown,
  spec: AddJobSpec = {},
): Promise<string> {
  const identifier = assertTaskIdentifier(typeof task === 'string' ? task : task.identifier);
  const queueName = queueOf(task, spec.queueName);
  const json = payloadJson(identifier, payload);
  if (spec.runAt !== undefined && Number.isNaN(spec.runAt.getTime())) {
    throw new TypeError(`runAt of a ${identifier} job is an invalid Date`);
  }
  if (spec.jobKey !== undefined) assertJobKey(spec.jobKey);
  if (
    spec.maxAttempts !== undefined &&
    !(
      Number.isInteger(spec.maxAttempts) &&
      spec.maxAttempts >= 1 &&
      spec.maxAttempts <= MAX_ATTEMPTS_LIMIT
    )
  ) {
    throw new RangeError(
      `maxAttempts of a ${identifier} job must be an integer from 1 to ${MAX_ATTEMPTS_LIMIT}, got ${spec.maxAttempts}`,
    );
  }
  const tx = db.tx('adding a job');
  // Named arguments, so the call does not depend on the parameter order of
  // add_job, which has changed between graphile-worker versions. The payload
  // goes as text: typed json, postgres.js would serialize the string again.
  const [row] = await tx<{ id: string }[]>`
    select id::text as id from graphile_worker.add_job(
      identifier => ${identifier}::text,
      payload => ${json}::text::json,
      queue_name => ${queueName}::text,
      run_at => ${spec.runAt ?? null}::timestamptz,
      max_attempts => ${spec.maxAttempts ?? null}::int,
      job_key => ${spec.jobKey ?? null}::text
    )`;
  if (!row) throw new Error(`graphile_worker.add_job returned no row for ${identifier}`);
  return row.id;
}

function queueOf(task: JobTarget, requested: string | undefined): string | null {
  if (requested !== undefined) assertQueueName(requested);
  if (typeof task === 'string') return requested ?? null;
  if (requested !== undefined && requested !== task.queue) {
    throw new TypeError(
      `task ${task.identifier} runs in queue "${task.queue}", not "${requested}"`,
    );
  }
  return task.queue;
}

// JSON.stringify returns undefined for a function or a symbol, whatever its
// declared type says.
const stringify: (value: unknown) => string | undefined = JSON.stringify;

function payloadJson(identifier: string, payload: unknown): string | null {
  // null lets add_job store its default payload, {}.
  if (payload === undefined) return null;
  let json: string | undefined;
  try {
    json = stringify(payload);
  } catch (err) {
    throw new TypeError(
      `the payload of a ${identifier} job is not JSON: ${(err as Error).message}`,
      { cause: err },
    );
  }
  if (json === undefined) throw new TypeError(`the payload of a ${identifier} job is not JSON`);
  return json;
}
