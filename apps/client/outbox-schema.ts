/**
 * The outbox file's schema. Version 2 adds, to what version 1 kept, the
 * failure reason `outcome_unknown`, the answer's `Idempotent-Replay` marker
 * (`marked`) and the start of the attempt in flight
 * (`attempt_started_at`). Version 3 adds the server's time seen before the
 * intent's first attempt (`server_anchor`), from which its key's age is
 * counted on the server's clock too, and when the command that stated it printed
 * its result (`reported_at`). Version 4 adds whether the last answer of a
 * pending intent was unmarked (`unmarked`: a 2xx or a stored status without
 * `Idempotent-Replay`, repeated once; a second one in a row is an unknown
 * outcome), which version 3 kept as a prefix of `last_error`, and the
 * partial index `intents_unreported` over the intents whose result no
 * command printed (the guard against stating an equal one again). Version 5
 * adds the shortest key lifetime known since just before the intent's first
 * attempt (`key_lifetime_ms`): a server that says later it keeps keys
 * longer may have kept this key only as long as it said then. A version
 * 1, 2, 3 or 4 file is migrated when it is opened,
 * in the opener's transaction: SQLite cannot alter a CHECK, so the intents
 * move to a new table by the procedure of the SQLite documentation ("Making
 * Other Kinds Of Table Schema Changes": create the new table, copy, drop
 * the old one, rename the new one, make its indexes again, check the
 * foreign keys), with foreign keys off, which the opener turns off before
 * its transaction and on after it.
 */
import type { DatabaseSync } from 'node:sqlite';
import { OutboxOpenError } from './outbox-errors.js';

/** The schema version this client writes. */
export const SCHEMA_VERSION = '6';

/** The failure reasons the schema allows, in the order they were added. */
export const FAILURES: readonly string[] = [
  'key_reuse',
  'expired',
  'unexpected_answer',
  'outcome_unknown',
];

const intentsTable = (name: string): string => `
create table ${name} (
  seq integer primary key autoincrement,
  key text not null unique,
  operation text not null,
  method text not null,
  path text not null,
  body text,
  lanes text not null,
  created_at integer not null,
  state text not null default 'pending' check (state in ('pending', 'done', 'failed')),
  failure text check (failure in (${FAILURES.map((f) => `'${f}'`).join(', ')})),
  attempts integer not null default 0,
  next_attempt_at integer not null default 0,
  attempt_started_at integer,
  server_anchor integer,
  reported_at integer,
  last_error text,
  status integer,
  replayed integer,
  marked integer check (marked in (0, 1)),
  unmarked integer not null default 0 check (unmarked in (0, 1)),
  key_lifetime_ms integer,
  answer_headers text,
  answer_body text,
  finished_at integer
) strict;`;

const PENDING_INDEX = `create index intents_pending on intents (seq) where state = 'pending';`;

/**
 * The intents a new equal one must not repeat: pending, settled and not
 * reported, or failed in a way that may have taken effect. Few rows, so
 * the guard's look-up of an equal intent reads only these, however long
 * the outbox's history. Version 6 added the last condition.
 */
const UNREPORTED_INDEX = `create index intents_unreported on intents (operation, path, method, body)
  where state = 'pending' or reported_at is null or failure in ('outcome_unknown', 'expired');`;

/** How version 3 marked an unmarked last answer: the start of its last error. */
const V3_UNMARKED = `state = 'pending' and substr(last_error, 1, 17) = 'unmarked answer: '`;

const SCHEMA = `
create table meta (name text primary key, value text not null) strict;
${intentsTable('intents')}
${PENDING_INDEX}
${UNREPORTED_INDEX}
create table intent_lanes (
  lane text not null,
  seq integer not null references intents (seq),
  primary key (lane, seq)
) strict, without rowid;
insert into meta (name, value) values ('schema_version', '${SCHEMA_VERSION}');
`;

/** The columns of version 1's intents, all kept by versions 2 to 5. */
const V1_COLUMNS =
  'seq, key, operation, method, path, body, lanes, created_at, state, failure, attempts, next_attempt_at, last_error, status, replayed, answer_headers, answer_body, finished_at';

/** The columns of version 2's intents, all kept by versions 3 to 6. */
const V2_COLUMNS = `${V1_COLUMNS}, marked, attempt_started_at`;

/**
 * The copy of the intents into the new table, by the version migrated
 * from. From version 1: a replay was marked (`Idempotent-Replay: true`);
 * whether an answer recorded as no replay carried `Idempotent-Replay:
 * false` was not kept, so its `marked` is null (not known); version 1 did
 * not count an attempt cut off by a crash, so a pending intent may have
 * one behind it: its `attempt_started_at` is its creation time. From either:
 * the server's time before the first attempt was not kept (null: the age
 * counts on the client's clock alone); an intent settled before is taken as
 * reported when it settled (an older client printed what it settled, and
 * an equal new intent must not be refused for it).
 */
const COPY: Record<string, string> = {
  '1': `insert into intents_new (${V1_COLUMNS}, marked, attempt_started_at, server_anchor, reported_at, unmarked)
  select ${V1_COLUMNS}, case when replayed = 1 then 1 end,
         case when state = 'pending' then created_at end, null,
         case when state <> 'pending' then finished_at end,
         case when ${V3_UNMARKED} then 1 else 0 end from intents;`,
  '2': `insert into intents_new (${V2_COLUMNS}, server_anchor, reported_at, unmarked)
  select ${V2_COLUMNS}, null, case when state <> 'pending' then finished_at end,
         case when ${V3_UNMARKED} then 1 else 0 end from intents;`,
};

/**
 * From version 3: the new column is added in place (a nullable CHECK is
 * not altered, so no copy is needed), set from the prefix version 3 wrote,
 * and the index made.
 */
const FROM_V3 = `
alter table intents add column unmarked integer not null default 0 check (unmarked in (0, 1));
update intents set unmarked = 1 where ${V3_UNMARKED};
alter table intents add column key_lifetime_ms integer;
${UNREPORTED_INDEX}
update meta set value = '${SCHEMA_VERSION}' where name = 'schema_version';
`;

/**
 * From version 4: the lifetime column is added in place; an intent sent
 * before has none recorded, and the lifetime in force is used for it.
 */
const FROM_V4 = `
alter table intents add column key_lifetime_ms integer;
drop index intents_unreported;
${UNREPORTED_INDEX}
update meta set value = '${SCHEMA_VERSION}' where name = 'schema_version';
`;

/**
 * From version 5: the guard's index also holds the intents that may have
 * taken effect, reported or not.
 */
const FROM_V5 = `
drop index intents_unreported;
${UNREPORTED_INDEX}
update meta set value = '${SCHEMA_VERSION}' where name = 'schema_version';
`;

const migration = (from: string): string => `
${intentsTable('intents_new')}
${COPY[from] ?? ''}
drop table intents;
alter table intents_new rename to intents;
${PENDING_INDEX}
${UNREPORTED_INDEX}
update meta set value = '${SCHEMA_VERSION}' where name = 'schema_version';
`;

function migrate(db: DatabaseSync, file: string, from: string): void {
  const sequence = (sql: string): number => Number(db.prepare(sql).get()?.['seq'] ?? 0);
  const used = sequence(`select seq from sqlite_sequence where name = 'intents'`);
  db.exec(migration(from));
  // The copy sets the sequence to the largest seq copied; the old one may
  // have been larger (a row removed by hand), and numbers are never reused.
  const copied = sequence('select coalesce(max(seq), 0) as seq from intents');
  db.exec(`delete from sqlite_sequence where name = 'intents'`);
  db.prepare(`insert into sqlite_sequence (name, seq) values ('intents', ?)`).run(
    Math.max(used, copied),
  );
  const broken = db.prepare('pragma foreign_key_check').all();
  if (broken.length > 0) {
    const tables = [...new Set(broken.map((r) => String(r['table'])))].join(', ');
    throw new OutboxOpenError(
      `cannot open outbox ${file}: migrating it from schema version ${from} to ${SCHEMA_VERSION} failed: ${tables} has rows that break their foreign key (pragma foreign_key_check found ${String(broken.length)}); the file is left as it was: repair or remove those rows`,
    );
  }
}

/**
 * Makes the schema in an empty database, or checks an outbox's version and
 * migrates a version 1 to 5 file to version 6. Runs inside the caller's write
 * transaction (a failed migration is rolled back with it), with foreign
 * keys off.
 *
 * @param db the open database, in a write transaction, foreign keys off.
 * @param file the file's path, for messages.
 * @param create whether an empty database is made an outbox.
 * @throws OutboxOpenError when the database is empty and `create` is false,
 *   holds other tables, has another schema version than 1 to 6, or breaks
 *   a foreign key while migrated.
 */
export function prepareSchema(db: DatabaseSync, file: string, create: boolean): void {
  const tables = db
    .prepare(`select name from sqlite_master where type = 'table' and name not like 'sqlite_%'`)
    .all()
    .map((r) => String(r['name']));
  if (tables.length === 0) {
    if (!create)
      throw new OutboxOpenError(`cannot open outbox ${file}: it is empty, not an outbox`);
    db.exec(SCHEMA);
    return;
  }
  if (!tables.includes('meta') || !tables.includes('intents')) {
    throw new OutboxOpenError(
      `cannot open outbox ${file}: the database is not an outbox (it holds ${tables.join(', ')})`,
    );
  }
  const version = db.prepare(`select value from meta where name = 'schema_version'`).get();
  const from = version?.['value'];
  if (typeof from === 'string' && Object.hasOwn(COPY, from)) {
    migrate(db, file, from);
    return;
  }
  if (from === SCHEMA_VERSION) return;
  if (from === '3') {
    // A version 3 file written before `reported_at` was added to it (never
    // released): a nullable column is added in place, and its settled rows
    // count as reported when they settled, as a migration's do.
    const columns = db.prepare('pragma table_info(intents)').all();
    if (!columns.some((c) => c['name'] === 'reported_at')) {
      db.exec('alter table intents add column reported_at integer');
      db.exec(`update intents set reported_at = finished_at where state <> 'pending'`);
    }
    db.exec(FROM_V3);
    return;
  }
  if (from === '4') {
    db.exec(FROM_V4);
    return;
  }
  if (from === '5') {
    db.exec(FROM_V5);
    return;
  }
  throw new OutboxOpenError(
    `cannot open outbox ${file}: it has schema version ${String(from)}, this client knows 1 to ${SCHEMA_VERSION}`,
  );
}
