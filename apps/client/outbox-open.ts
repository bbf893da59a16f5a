/**
 * Opening an outbox file: refusals of what is no file (`:memory:`, a
 * `file:` URI, a missing file for a reader) and of a file another user
 * owns or may write (outbox-private.ts), a new file made 0600 before
 * SQLite sees it, the settings that make it durable and single-writer (WAL,
 * `synchronous = FULL`, `locking_mode = EXCLUSIVE`), the schema made or
 * migrated (outbox-schema.ts) in one transaction, and SQLite's errors while
 * opening turned into the outbox's own. Also the reports of an open file:
 * its settings, and `quick_check`.
 */
import path from 'node:path';
import type { DatabaseSync } from 'node:sqlite';
import {
  OutboxDamagedError,
  OutboxError,
  OutboxLockedError,
  OutboxOpenError,
  storageError,
} from './outbox-errors.js';
import type { OutboxOptions, StorageSettings } from './outbox-intent.js';
import { privateDirectory, privateFile } from './outbox-private.js';
import { prepareSchema } from './outbox-schema.js';

// A built-in through process.getBuiltinModule, not an ES import: the import
// reads every export of the module, lazy ones included, which costs the
// command line's start-up (docs/DECISIONS.md, "The client sends with
// node:http").
const { accessSync, closeSync, constants, lstatSync, openSync, statSync } =
  process.getBuiltinModule('node:fs');

const SYNCHRONOUS = ['off', 'normal', 'full', 'extra'];
/** SQLite's result codes met when opening (sqlite3.h). */
const SQLITE_BUSY = 5;
const SQLITE_LOCKED = 6;
const SQLITE_CORRUPT = 11;
const SQLITE_NOTADB = 26;

function sqliteErrorCode(err: unknown): number | undefined {
  const code = (err as { errcode?: unknown }).errcode;
  return typeof code === 'number' ? code : undefined;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Makes a missing outbox file, empty, readable and writable by its owner
 * alone (0600), before SQLite opens it: it holds request bodies, answers
 * and the principal's id, and SQLite gives the files it keeps beside it
 * (`-wal`, `-shm`) the mode of the database file. An existing file is left
 * as it is.
 * @param file the outbox's path.
 * @throws OutboxOpenError when the file cannot be made (e.g. its folder
 *   is missing).
 */
function createPrivate(file: string): void {
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'EEXIST') return;
    throw new OutboxOpenError(`cannot open outbox ${file}: ${message(err)}`);
  }
  closeSync(fd);
}

/**
 * Rolls back after a failed statement, quietly: when the failure was the
 * file's (a damaged page, an I/O error), the rollback may fail as well,
 * and the first error is the one to report. SQLite rolls back on its own
 * what a failed rollback leaves.
 */
export function rollback(db: DatabaseSync): void {
  try {
    if (db.isTransaction) db.exec('rollback');
  } catch {
    // The statement's own error is thrown by the caller.
  }
}

/**
 * Checks that the outbox's directory may be written in: SQLite keeps the
 * `-wal` file beside the outbox and makes it when the outbox is opened, so
 * a file in a read-only place fails there, with SQLite's "attempt to write
 * a readonly database" or "disk I/O error", which names neither cause nor
 * cure. A missing directory is left to the open, which names it.
 *
 * @param file the outbox's path.
 * @throws OutboxOpenError naming the directory when it is not writable.
 */
function writableDirectory(file: string): void {
  const dir = path.dirname(path.resolve(file));
  try {
    accessSync(dir, constants.W_OK);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'EACCES' || code === 'EROFS' || code === 'EPERM') {
      throw new OutboxOpenError(
        `cannot open outbox ${file}: the directory ${dir} is not writable by this user (SQLite keeps the outbox's -wal file beside it): make it writable, or keep the outbox in a directory that is`,
      );
    }
  }
}

/**
 * Opens an outbox file, prepared: see {@link Outbox.open}, whose contract
 * this is.
 *
 * @param file the file's path.
 * @param options whether a missing file is made (the clock is the outbox's).
 * @returns the open database, its lock taken.
 * @throws OutboxLockedError, OutboxDamagedError, OutboxOpenError as
 *   {@link Outbox.open} says.
 */
export function openDatabase(file: string, options: OutboxOptions = {}): DatabaseSync {
  if (file === ':memory:') {
    throw new OutboxOpenError(
      `cannot open outbox ${file}: an outbox in memory is lost with the process; give a file`,
    );
  }
  if (/^file:/i.test(file)) {
    // node:sqlite reads such a name as a URI, whose options (nolock=1,
    // mode=memory) would undo the one-writer lock or the durability.
    throw new OutboxOpenError(
      `cannot open outbox ${file}: a file: URI is not a file path; write ./${file} for a file of that name`,
    );
  }
  const create = options.create ?? true;
  if (!create) {
    // Before SQLite sees it: opening makes a missing file, and WAL mode
    // writes a header into an empty one.
    const stat = statSync(file, { throwIfNoEntry: false });
    if (stat === undefined) {
      throw new OutboxOpenError(`cannot open outbox ${file}: the file does not exist`);
    }
    if (stat.isFile() && stat.size === 0) {
      throw new OutboxOpenError(`cannot open outbox ${file}: it is empty, not an outbox`);
    }
  }
  if (file !== '') writableDirectory(file);
  // An empty name is SQLite's temporary database, refused below by its
  // journal mode; there is no file to make.
  let at = file;
  if (create && file !== '' && lstatSync(file, { throwIfNoEntry: false }) === undefined) {
    at = privateDirectory(file);
    createPrivate(at);
  }
  const warn =
    options.onWarning ??
    ((detail: string) => {
      process.emitWarning(detail, { code: 'OUTBOX_MODES_UNCHECKED' });
    });
  const checked = file === '' ? file : privateFile(at, warn);
  const { DatabaseSync: Database } = process.getBuiltinModule('node:sqlite');
  let db: DatabaseSync;
  try {
    db = new Database(checked, { timeout: 0, enableForeignKeyConstraints: true });
  } catch (err) {
    throw new OutboxOpenError(`cannot open outbox ${file}: ${message(err)}`);
  }
  try {
    // Exclusive locking first: the lock is taken by the first write below
    // and kept until close, and WAL then needs no shared-memory file.
    db.exec('pragma locking_mode = exclusive');
    const mode = db.prepare('pragma journal_mode = wal').get()?.['journal_mode'];
    if (typeof mode !== 'string' || mode.toLowerCase() !== 'wal') {
      throw new OutboxOpenError(
        `cannot open outbox ${file === '' ? '""' : file}: its journal mode is ${String(mode)}, not wal: an outbox is a file on a local file system (an in-memory or temporary database is lost with the process)`,
      );
    }
    db.exec('pragma synchronous = full');
    // Off for a migration (outbox-schema.ts), which moves the table the
    // lanes refer to; the pragma does nothing inside a transaction.
    db.exec('pragma foreign_keys = off');
    db.exec('begin immediate');
    try {
      prepareSchema(db, file, create);
      // The mark of time, for a file that has rows but no mark yet (one
      // of version 1): the latest time its rows recorded.
      db.exec(`insert or ignore into meta (name, value)
               select 'clock_high_water', cast(max(coalesce(max(created_at), 0),
                      coalesce(max(finished_at), 0), coalesce(max(attempt_started_at), 0)) as text)
                 from intents`);
      db.exec('commit');
    } catch (err) {
      rollback(db);
      throw err;
    }
    db.exec('pragma foreign_keys = on');
  } catch (err) {
    db.close();
    if (err instanceof OutboxError) throw err;
    const code = sqliteErrorCode(err);
    if (code === SQLITE_BUSY || code === SQLITE_LOCKED) {
      throw new OutboxLockedError(
        `outbox ${file} is in use by another process or connection (one writer per outbox file)`,
      );
    }
    if (code === SQLITE_NOTADB) {
      throw new OutboxOpenError(
        `cannot open outbox ${file}: the file is not a database (or its header is damaged): if it is an outbox, restore it from a copy, or move it aside to start a new one`,
      );
    }
    if (code !== undefined && (code & 0xff) === SQLITE_CORRUPT) throw storageError(file, err);
    throw new OutboxOpenError(`cannot open outbox ${file}: ${message(err)}`);
  }
  return db;
}

/**
 * The storage settings in force.
 *
 * @param db the open database.
 * @returns journal mode, synchronous level and locking mode, in lower
 *   case, and whether foreign keys are enforced.
 */
export function readStorage(db: DatabaseSync): StorageSettings {
  const one = (pragma: string): string => {
    const row = db.prepare(`pragma ${pragma}`).get();
    const value = row === undefined ? undefined : Object.values(row)[0];
    return typeof value === 'string' || typeof value === 'number' ? String(value) : '';
  };
  const sync = one('synchronous');
  return {
    journalMode: one('journal_mode').toLowerCase(),
    synchronous: SYNCHRONOUS[Number(sync)] ?? sync,
    lockingMode: one('locking_mode').toLowerCase(),
    foreignKeys: one('foreign_keys') === '1',
  };
}

/**
 * SQLite's `quick_check` of the whole file; see {@link Outbox.check}.
 *
 * @param db the open database.
 * @param file the file's path, for the message.
 * @throws OutboxDamagedError naming the file and the first problem found.
 */
export function quickCheck(db: DatabaseSync, file: string): void {
  const rows = db.prepare('pragma quick_check(1)').all();
  const first = rows[0] === undefined ? undefined : Object.values(rows[0])[0];
  if (first !== 'ok') {
    // SQLite's report spans lines ("*** in database main ***", then
    // the pages); the message stays one line.
    const found = String(first)
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('***'))
      .join('; ');
    throw new OutboxDamagedError(
      `outbox ${file} is damaged (${found}): nothing more is sent from it; restore it from a copy, or move it aside (with its -wal file) and check its pending intents by hand before stating them again`,
    );
  }
}
