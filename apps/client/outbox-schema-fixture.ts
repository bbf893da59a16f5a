/**
 * What the outbox's schema tests share: the SQL of the old schema versions
 * as the client of then wrote it, rows to put in them, and a snapshot of a
 * file's rows, version and indexes read with node:sqlite directly
 * (outbox-schema.test.ts, outbox-schema-later.test.ts,
 * outbox-unmarked.test.ts).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DatabaseSync, type SQLOutputValue } from 'node:sqlite';
import type { Test } from 'tap';

/** The schema of version 1, as the client wrote it before version 2. */
export const V1_SCHEMA = `
create table meta (name text primary key, value text not null) strict;
create table intents (
  seq integer primary key autoincrement,
  key text not null unique,
  operation text not null,
  method text not null,
  path text not null,
  body text,
  lanes text not null,
  created_at integer not null,
  state text not null default 'pending' check (state in ('pending', 'done', 'failed')),
  failure text check (failure in ('key_reuse', 'expired', 'unexpected_answer')),
  attempts integer not null default 0,
  next_attempt_at integer not null default 0,
  last_error text,
  status integer,
  replayed integer,
  answer_headers text,
  answer_body text,
  finished_at integer
) strict;
create index intents_pending on intents (seq) where state = 'pending';
create table intent_lanes (
  lane text not null,
  seq integer not null references intents (seq),
  primary key (lane, seq)
) strict, without rowid;
insert into meta (name, value) values ('schema_version', '1');
`;

export const V1_COLUMNS =
  'seq, key, operation, method, path, body, lanes, created_at, state, failure, attempts, next_attempt_at, last_error, status, replayed, answer_headers, answer_body, finished_at';

export const KEYS = [
  '0190f2a4-1b2c-7d3e-8f40-000000000001',
  '0190f2a4-1b2c-7d3e-8f40-000000000002',
  '0190f2a4-1b2c-7d3e-8f40-000000000003',
  '0190f2a4-1b2c-7d3e-8f40-000000000004',
  '0190f2a4-1b2c-7d3e-8f40-000000000005',
];
export const BODY = '{"amount":5,"from_account_id":"a","to_account_id":"b"}';

/** A file in a new temporary folder, removed when the test ends. */
export async function tempFile(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-schema-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return path.join(dir, 'v1.sqlite');
}

/** The intents table of version 2, as the client wrote it before version 3. */
export const V2_INTENTS = `
create table intents (
  seq integer primary key autoincrement,
  key text not null unique,
  operation text not null,
  method text not null,
  path text not null,
  body text,
  lanes text not null,
  created_at integer not null,
  state text not null default 'pending' check (state in ('pending', 'done', 'failed')),
  failure text check (failure in ('key_reuse', 'expired', 'unexpected_answer', 'outcome_unknown')),
  attempts integer not null default 0,
  next_attempt_at integer not null default 0,
  attempt_started_at integer,
  last_error text,
  status integer,
  replayed integer,
  marked integer check (marked in (0, 1)),
  answer_headers text,
  answer_body text,
  finished_at integer
) strict;`;

/** What {@link snapshot} reads of a file. */
export interface Snapshot {
  readonly intents: Record<string, SQLOutputValue>[];
  readonly lanes: Record<string, SQLOutputValue>[];
  readonly principal: Record<string, SQLOutputValue> | undefined;
  readonly version: SQLOutputValue | undefined;
  readonly sequence: SQLOutputValue | undefined;
  readonly table: string;
  readonly indexes: string[];
  readonly foreignKeyProblems: Record<string, SQLOutputValue>[];
  readonly answers: Record<string, SQLOutputValue>[];
}

/** The rows, version, table, indexes and foreign key problems of a file. */
export function snapshot(file: string): Snapshot {
  const db = new DatabaseSync(file);
  try {
    return {
      intents: db.prepare(`select ${V1_COLUMNS} from intents order by seq`).all(),
      lanes: db.prepare('select lane, seq from intent_lanes order by seq, lane').all(),
      principal: db.prepare(`select value from meta where name = 'principal_id'`).get(),
      version: db.prepare(`select value from meta where name = 'schema_version'`).get()?.['value'],
      sequence: db.prepare(`select seq from sqlite_sequence where name = 'intents'`).get()?.['seq'],
      table: String(
        db.prepare(`select sql from sqlite_master where name = 'intents'`).get()?.['sql'],
      ),
      indexes: db
        .prepare(`select name from sqlite_master where type = 'index' and tbl_name = 'intents'`)
        .all()
        .map((r) => String(r['name'])),
      foreignKeyProblems: db.prepare('pragma foreign_key_check').all(),
      answers: db.prepare('select seq, marked, attempt_started_at from intents order by seq').all(),
    };
  } finally {
    db.close();
  }
}

/** The schema of version 3, as the client wrote it before version 4. */
export const V3_SCHEMA = `
create table meta (name text primary key, value text not null) strict;
create table intents (
  seq integer primary key autoincrement,
  key text not null unique,
  operation text not null,
  method text not null,
  path text not null,
  body text,
  lanes text not null,
  created_at integer not null,
  state text not null default 'pending' check (state in ('pending', 'done', 'failed')),
  failure text check (failure in ('key_reuse', 'expired', 'unexpected_answer', 'outcome_unknown')),
  attempts integer not null default 0,
  next_attempt_at integer not null default 0,
  attempt_started_at integer,
  server_anchor integer,
  reported_at integer,
  last_error text,
  status integer,
  replayed integer,
  marked integer check (marked in (0, 1)),
  answer_headers text,
  answer_body text,
  finished_at integer
) strict;
create index intents_pending on intents (seq) where state = 'pending';
create table intent_lanes (
  lane text not null,
  seq integer not null references intents (seq),
  primary key (lane, seq)
) strict, without rowid;
insert into meta (name, value) values ('schema_version', '3');
`;
