/**
 * The outbox's own errors, in a module of their own so that the outbox and
 * its schema (outbox-schema.ts) both throw them; outbox.ts exports them.
 */

/** Base of the outbox's own errors. */
export class OutboxError extends Error {
  override readonly name: string = 'OutboxError';
}

/**
 * The file cannot be used as an outbox: unreadable, missing or empty (when
 * it must exist), not a database, another database, newer, not a WAL file
 * (in memory, temporary), or a version 1 file whose migration failed.
 */
export class OutboxOpenError extends OutboxError {
  override readonly name = 'OutboxOpenError';
}

/** Another connection (in this process or another) holds the outbox file. */
export class OutboxLockedError extends OutboxError {
  override readonly name = 'OutboxLockedError';
}

/** A row of the outbox does not hold what the outbox writes; it is never sent. */
export class OutboxCorruptError extends OutboxError {
  override readonly name = 'OutboxCorruptError';
}

/** The token's principal is not the one the outbox belongs to. */
export class OutboxPrincipalError extends OutboxError {
  override readonly name = 'OutboxPrincipalError';
}

/** A key already in the outbox was stated again for another request. */
export class IntentConflictError extends OutboxError {
  override readonly name = 'IntentConflictError';
}
