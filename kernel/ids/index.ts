/**
 * Identifiers: UUIDv7 creation and checking.
 *
 * @packageDocumentation
 */
export type { Id } from './uuid.js';
export { idTimestamp, isUuid, isUuidV7, newId, parseId } from './uuid.js';
