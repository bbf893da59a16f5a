/**
 * The shape every module's public face (its index.ts) hands to the
 * composition root: its HTTP routes, and (through platform/jobs) its tasks
 * and cron items. The root decides which of them a process role runs.
 */
import type { HttpServer } from '../http/server.js';
import type { CronItemDescriptor, TaskDescriptor } from '../jobs/index.js';

/** One business module, as the composition root sees it. */
export interface ModuleDescriptor {
  /** The module's name, e.g. `identity`; the prefix of its task identifiers. */
  readonly name: string;
  /**
   * Registers the module's routes (under `/api/v1`) on the server. Called
   * once, after the cross-cutting stages and before `ready()`.
   */
  readonly routes?: (app: HttpServer) => void | Promise<void>;
  /** Graphile Worker tasks the module runs (roles `worker` and `all`). */
  readonly tasks?: readonly TaskDescriptor[];
  /** Cron items that schedule some of those tasks. */
  readonly cron?: readonly CronItemDescriptor[];
}
