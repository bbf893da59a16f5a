/**
 * Background jobs on graphile-worker: the task and cron item descriptors
 * modules export, the helper that adds a job in the caller's unit of work,
 * the owner-side schema installation with the application role's grants, and
 * the worker the `worker` and `all` roles run.
 *
 * @packageDocumentation
 */
export type {
  CronItemDescriptor,
  JobHelpers,
  JobInfo,
  TaskDescriptor,
  TaskHandler,
} from './task.js';
export {
  assertJobKey,
  assertQueueName,
  assertTaskIdentifier,
  defineCronItem,
  defineTask,
  MODULE_ACTION,
  TASK_IDENTIFIER,
} from './task.js';
export type { AddJobSpec, JobTarget } from './add-job.js';
export { addJob } from './add-job.js';
export type { InstallWorkerSchemaOptions } from './schema.js';
export { installWorkerSchema, WORKER_SCHEMA } from './schema.js';
export type { WorkerHandle, WorkerOptions } from './worker.js';
export { JOB_METRICS, startWorker } from './worker.js';
