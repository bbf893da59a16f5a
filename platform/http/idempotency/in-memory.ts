/**
 * The in-memory store and unit of work, for an application's fast tests
 * and for trying the plugin without a database: what is written is lost
 * with the process, and nothing is shared between processes. The package
 * entry point `./in-memory`; a production app gives the plugin a store
 * and a unit of work on its database (README.md, Options).
 *
 * @packageDocumentation
 */
export { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
export {
  InMemoryUnitOfWork,
  type InMemoryTransaction,
  type InMemoryUnitOfWorkOptions,
} from '../../../kernel/txn/in-memory.js';
