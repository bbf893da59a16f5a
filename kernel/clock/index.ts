/**
 * Time: the Clock port, the system clock and a manual clock for tests.
 *
 * @packageDocumentation
 */
export type { Clock } from './clock.js';
export { ManualClock, systemClock } from './clock.js';
