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

/**
 * SQLite could not read or write the open outbox file: a damaged page
 * (`database disk image is malformed`), an I/O error, a full disk, a
 * read-only file or directory. The message is one line naming the file and
 * what to do; what the file held is as it was before the failed statement
 * (SQLite rolls the statement back).
 */
export class OutboxDamagedError extends OutboxError {
  override readonly name = 'OutboxDamagedError';
}

/** SQLite's primary result codes met on a file (sqlite3.h). */
const SQLITE_READONLY = 8;
const SQLITE_IOERR = 10;
const SQLITE_CORRUPT = 11;
const SQLITE_FULL = 13;
const SQLITE_CANTOPEN = 14;
const SQLITE_NOTADB = 26;

/**
 * What an error of node:sqlite means for the outbox file, in one line
 * naming it and what to do; any other error is returned as it is.
 *
 * @param file the outbox's path.
 * @param err what a statement threw.
 * @returns an {@link OutboxDamagedError} for an error of SQLite (one with
 *   the code `ERR_SQLITE_ERROR`), else `err` itself.
 */
export function storageError(file: string, err: unknown): unknown {
  if (err instanceof OutboxError) return err;
  const { code, errcode, errstr, message } = err as {
    code?: unknown;
    errcode?: unknown;
    errstr?: unknown;
    message?: unknown;
  };
  if (code !== 'ERR_SQLITE_ERROR') return err;
  const primary = typeof errcode === 'number' ? errcode & 0xff : undefined;
  const said = String(typeof message === 'string' ? message : errstr).split('\n')[0] ?? '';
  switch (primary) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return new OutboxDamagedError(
        `outbox ${file} is damaged (${said}): nothing more is sent from it; restore it from a copy, or move it aside (with its -wal file) and check its pending intents by hand before stating them again`,
      );
    case SQLITE_FULL:
      return new OutboxDamagedError(
        `outbox ${file} could not be written: the disk is full (${said}); the change was not recorded: free space, then run the command again`,
      );
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
      return new OutboxDamagedError(
        `outbox ${file} could not be written (${said}): the file and its directory must be writable by this user; fix that, then run the command again`,
      );
    case SQLITE_IOERR:
      return new OutboxDamagedError(
        `outbox ${file} could not be read or written: an I/O error (${said}); check the disk and the directory, then run the command again; if it recurs, restore the file from a copy or move it aside`,
      );
    default:
      return new OutboxDamagedError(
        `outbox ${file}: SQLite failed (${said}); run the command again; if it recurs, restore the file from a copy or move it aside`,
      );
  }
}
