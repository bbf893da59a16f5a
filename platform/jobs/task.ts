/**
 * What modules declare: task descriptors (identifier, queue, handler) and
 * cron items, the rules their names follow, and their translation into the
 * cron items graphile-worker runs.
 */
import { parseCronItem, type CronItemOptions, type ParsedCronItem } from 'graphile-worker';
import type { Logger } from '../log/index.js';

/** What a running job is told about itself. */
export interface JobInfo {
  /** The job's id (a bigint, as a decimal string). */
  readonly id: string;
  /** Attempts so far, counting this one: 1 on the first run. */
  readonly attempts: number;
  /** The attempt after which a failure is final. */
  readonly maxAttempts: number;
}

/** What a task handler gets besides its payload. */
export interface JobHelpers {
  /**
   * Aborted when the worker is shutting down and the grace period is over: a
   * long handler stops at the next safe point and throws, so the job is
   * retried later rather than cut off mid-way.
   */
  readonly signal: AbortSignal;
  /** The worker's logger, bound to the task and the job id. */
  readonly logger: Logger;
  /** The job being run. */
  readonly job: JobInfo;
}

/**
 * Runs one job. Resolving completes the job (its row is deleted); throwing
 * fails this attempt, and the job is retried with exponential backoff until
 * `maxAttempts`. A handler may run more than once for one job (a crash after
 * its work but before the completion is recorded), so it must be idempotent.
 */
export type TaskHandler = (payload: unknown, helpers: JobHelpers) => Promise<void>;

/** A task a module registers with the worker. */
export interface TaskDescriptor {
  /** `module:action` in snake case, e.g. `sync:idempotency_cleanup`. */
  readonly identifier: string;
  /**
   * The named queue its jobs join. Jobs of one queue run one at a time across
   * every worker, so a task whose runs must not overlap gets a queue of its
   * own, and unrelated tasks do not share one.
   */
  readonly queue: string;
  /** The code that runs each job; the payload is untrusted JSON: validate it. */
  readonly handler: TaskHandler;
}

/** A recurring job a module registers with the worker. */
export interface CronItemDescriptor {
  /** Identifier of the task to run (registered in the same worker). */
  readonly task: string;
  /** Crontab time fields, exactly five: minute, hour, day of month, month, day of week (UTC). */
  readonly pattern: string;
  /** The cron item's own stable id; renaming it makes a new item. */
  readonly identifier: string;
  /**
   * A job key, so a run still waiting when the next one is due is replaced
   * rather than queued twice.
   */
  readonly jobKey?: string;
  /** The queue of the jobs it adds: must be the task's queue. */
  readonly queueName: string;
}

/** Task identifiers graphile-worker accepts in a crontab (no dots). */
export const TASK_IDENTIFIER = /^[_a-zA-Z][_a-zA-Z0-9:_-]*$/;

/** The module:action shape this project requires on top of {@link TASK_IDENTIFIER}. */
export const MODULE_ACTION = /^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$/;

const QUEUE_NAME = /^[a-z][a-z0-9_:-]*$/;
// Graphile-worker's own CHECK constraints on tasks.identifier and job_queues.queue_name.
const MAX_NAME_LENGTH = 128;
// And on jobs.key.
const MAX_JOB_KEY_LENGTH = 512;

/**
 * Checks a task identifier.
 *
 * @param identifier e.g. `sync:idempotency_cleanup`.
 * @returns the identifier.
 * @throws TypeError when it breaks {@link TASK_IDENTIFIER}, {@link MODULE_ACTION}
 *   or the length limit.
 */
export function assertTaskIdentifier(identifier: string): string {
  if (!TASK_IDENTIFIER.test(identifier)) {
    throw new TypeError(
      `task identifier ${JSON.stringify(identifier)} must match ${TASK_IDENTIFIER.source}`,
    );
  }
  if (!MODULE_ACTION.test(identifier)) {
    throw new TypeError(
      `task identifier ${JSON.stringify(identifier)} must be module:action in snake case`,
    );
  }
  if (identifier.length > MAX_NAME_LENGTH) {
    throw new TypeError(
      `task identifier ${JSON.stringify(identifier)} is longer than ${MAX_NAME_LENGTH} characters`,
    );
  }
  return identifier;
}

/**
 * Checks a queue name.
 *
 * @param name e.g. `maintenance`.
 * @returns the name.
 * @throws TypeError unless it is lower case letters, digits, `_`, `:` and `-`,
 *   starts with a letter, and has at most 128 characters.
 */
export function assertQueueName(name: string): string {
  if (!QUEUE_NAME.test(name) || name.length > MAX_NAME_LENGTH) {
    throw new TypeError(
      `queue name ${JSON.stringify(name)} must match ${QUEUE_NAME.source} with at most ${MAX_NAME_LENGTH} characters`,
    );
  }
  return name;
}

/**
 * Checks a job key.
 *
 * @param key the key.
 * @returns the key.
 * @throws TypeError when empty or longer than 512 characters.
 */
export function assertJobKey(key: string): string {
  if (key.length === 0 || key.length > MAX_JOB_KEY_LENGTH) {
    throw new TypeError(
      `job key must have 1 to ${MAX_JOB_KEY_LENGTH} characters, got ${key.length}`,
    );
  }
  return key;
}

/**
 * Declares a task: checks it once, where the module defines it, so a bad
 * name fails at start-up rather than when the first job is added.
 *
 * @param task identifier, queue and handler.
 * @returns a frozen copy.
 * @throws TypeError on a bad identifier, queue or handler.
 */
export function defineTask(task: TaskDescriptor): TaskDescriptor {
  assertTaskIdentifier(task.identifier);
  assertQueueName(task.queue);
  if (typeof task.handler !== 'function') {
    throw new TypeError(`task ${task.identifier} needs a handler function`);
  }
  return Object.freeze({ identifier: task.identifier, queue: task.queue, handler: task.handler });
}

/**
 * Declares a cron item: checks its names and parses its pattern.
 *
 * @param item task, pattern, identifier, optional job key and queue.
 * @returns a frozen copy.
 * @throws TypeError on a bad name, job key or pattern.
 */
export function defineCronItem(item: CronItemDescriptor): CronItemDescriptor {
  parseItem(item);
  return Object.freeze({
    task: item.task,
    pattern: item.pattern,
    identifier: item.identifier,
    queueName: item.queueName,
    ...(item.jobKey === undefined ? {} : { jobKey: item.jobKey }),
  });
}

/**
 * Checks a worker's tasks and cron items together and turns the cron items
 * into graphile-worker's parsed form.
 *
 * Parsing here, rather than passing a crontab string, keeps graphile-worker
 * from reading a `crontab` file from the working directory, and lets us refuse
 * what its own parser lets through (duplicate ids, unknown tasks).
 *
 * @param tasks the tasks the worker runs.
 * @param cron the cron items it schedules.
 * @returns one parsed item per cron item, without backfill.
 * @throws TypeError on no tasks, a bad or duplicate task or cron item, a cron
 *   item whose task is not registered, or whose queue is not its task's.
 */
export function toParsedCronItems(
  tasks: readonly TaskDescriptor[],
  cron: readonly CronItemDescriptor[],
): ParsedCronItem[] {
  if (tasks.length === 0) throw new TypeError('a worker needs at least one task');
  const byId = new Map<string, TaskDescriptor>();
  for (const task of tasks) {
    defineTask(task);
    if (byId.has(task.identifier))
      throw new TypeError(`task "${task.identifier}" is registered twice`);
    byId.set(task.identifier, task);
  }
  const seen = new Set<string>();
  return cron.map((item) => {
    if (seen.has(item.identifier))
      throw new TypeError(`cron item "${item.identifier}" is registered twice`);
    seen.add(item.identifier);
    const task = byId.get(item.task);
    if (!task)
      throw new TypeError(
        `cron item "${item.identifier}" names no task "${item.task}" of this worker`,
      );
    if (task.queue !== item.queueName) {
      throw new TypeError(
        `cron item "${item.identifier}" uses queue "${item.queueName}" but task "${task.identifier}" runs in queue "${task.queue}"`,
      );
    }
    return parseItem(item);
  });
}

function parseItem(item: CronItemDescriptor): ParsedCronItem {
  assertTaskIdentifier(item.task);
  assertQueueName(item.queueName);
  if (!TASK_IDENTIFIER.test(item.identifier) || item.identifier.length > MAX_NAME_LENGTH) {
    throw new TypeError(
      `cron item identifier ${JSON.stringify(item.identifier)} must match ${TASK_IDENTIFIER.source}`,
    );
  }
  if (item.jobKey !== undefined) assertJobKey(item.jobKey);
  const options: CronItemOptions = {
    queueName: item.queueName,
    // No backfill: a run missed while no worker was up is not made up for;
    // the next one is due soon enough for periodic maintenance.
    backfillPeriod: 0,
    ...(item.jobKey === undefined ? {} : { jobKey: item.jobKey, jobKeyMode: 'replace' as const }),
  };
  try {
    return parseCronItem({
      task: item.task,
      match: item.pattern,
      identifier: item.identifier,
      options,
    });
  } catch (err) {
    throw new TypeError(
      `cron item "${item.identifier}" has a bad pattern ${JSON.stringify(item.pattern)}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}
