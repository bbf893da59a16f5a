/**
 * The outbox's later schema versions on real files: a file of version 2, 3,
 * 4 or 5 (made with that version's SQL, or taken back to it) is migrated to
 * version 6 when it is opened, every row kept as it was, and the columns
 * each version added get the values the rows imply. Version 1 and a new
 * file: outbox-schema.test.ts.
 */
import { DatabaseSync } from 'node:sqlite';
import t from 'tap';
import { ID_A, ID_B } from './cli-fixture.js';
import { transferIntent } from './client.js';
import { Outbox } from './outbox.js';
import {
  BODY,
  KEYS,
  V1_COLUMNS,
  V1_SCHEMA,
  V2_INTENTS,
  snapshot,
  tempFile,
} from './outbox-schema-fixture.js';

void t.test('a version 2 file is migrated to version 6 with its rows unchanged', async (t) => {
  const file = await tempFile(t);
  const db = new DatabaseSync(file);
  db.exec('pragma journal_mode = wal');
  db.exec(
    V1_SCHEMA.replace(/create table intents \([^;]*\) strict;/, V2_INTENTS).replace(
      "'schema_version', '1'",
      "'schema_version', '2'",
    ),
  );
  db.exec(`insert into intents (key, operation, method, path, body, lanes, created_at, attempts,
             attempt_started_at, last_error)
           values ('${KEYS[0] ?? ''}', 'createTransfer', 'POST', '/api/v1/transfers', '${BODY}',
             '["account:a"]', 1_000, 1, 1_500, null)`);
  db.exec(`insert into intents (key, operation, method, path, body, lanes, created_at, state,
             attempts, status, replayed, marked, answer_headers, answer_body, finished_at)
           values ('${KEYS[1] ?? ''}', 'createTransfer', 'POST', '/api/v1/transfers', '${BODY}',
             '[]', 1_100, 'done', 1, 201, 0, 1, '{}', '{"id":"t"}', 1_200)`);
  db.exec(`insert into intent_lanes (lane, seq) values ('account:a', 1)`);
  const before = db.prepare(`select ${V1_COLUMNS}, marked, attempt_started_at from intents`).all();
  db.close();
  const outbox = Outbox.open(file);
  const intents = outbox.list();
  t.equal(intents.length, 2);
  t.match(intents, [
    {
      seq: 1,
      state: 'pending',
      attempts: 1,
      attemptStartedAt: 1_500,
      serverAnchor: null,
      reportedAt: null,
    },
    {
      seq: 2,
      state: 'done',
      answer: { status: 201, marked: true },
      serverAnchor: null,
      reportedAt: 1_200,
    },
  ]);
  outbox.close();
  const after = snapshot(file);
  t.equal(after.version, '6');
  t.match(after.table, /server_anchor/);
  t.same(after.foreignKeyProblems, []);
  const kept = new DatabaseSync(file);
  t.same(
    kept.prepare(`select ${V1_COLUMNS}, marked, attempt_started_at from intents`).all(),
    before,
    'every row is as it was, column by column',
  );
  kept.close();
});

void t.test(
  'a version 3 file written before reported_at gets it, its settled rows reported when they settled',
  async (t) => {
    const file = await tempFile(t);
    const db = new DatabaseSync(file);
    db.exec('pragma journal_mode = wal');
    db.exec(
      V1_SCHEMA.replace(
        /create table intents \([^;]*\) strict;/,
        V2_INTENTS.replace(
          'attempt_started_at integer,',
          'attempt_started_at integer,\n  server_anchor integer,',
        ),
      ).replace("'schema_version', '1'", "'schema_version', '3'"),
    );
    db.exec(`insert into intents (key, operation, method, path, body, lanes, created_at, attempts)
             values ('${KEYS[0] ?? ''}', 'createTransfer', 'POST', '/api/v1/transfers', '${BODY}',
               '[]', 1_000, 0)`);
    db.exec(`insert into intents (key, operation, method, path, body, lanes, created_at, state,
               attempts, status, replayed, marked, answer_headers, answer_body, finished_at)
             values ('${KEYS[1] ?? ''}', 'createTransfer', 'POST', '/api/v1/transfers', '${BODY}',
               '[]', 1_100, 'done', 1, 201, 0, 1, '{}', '{"id":"t"}', 1_200)`);
    db.close();
    const outbox = Outbox.open(file);
    const intents = outbox.list();
    outbox.close();
    t.equal(intents.length, 2);
    t.match(intents, [
      { seq: 1, state: 'pending', reportedAt: null },
      { seq: 2, state: 'done', reportedAt: 1_200 },
    ]);
  },
);

void t.test(
  'a version 4 file gains the key lifetime column in place, its rows unchanged, and its intents keep the shortest lifetime they were attempted under',
  async (t) => {
    const file = await tempFile(t);
    const made = Outbox.open(file, { clock: () => 1_000 });
    const { intent } = made.enqueue({ operation: 'op', method: 'POST', path: '/x', body: {} });
    made.close();
    // Back to what version 4 wrote.
    const v4 = new DatabaseSync(file);
    v4.exec('alter table intents drop column key_lifetime_ms');
    v4.exec(`update meta set value = '4' where name = 'schema_version'`);
    const before = v4.prepare('select * from intents').all();
    v4.close();
    const outbox = Outbox.open(file, { clock: () => 2_000 });
    t.equal(outbox.get(intent.key)?.keyLifetimeMs, null, 'none recorded before');
    outbox.recordAttempt(intent.seq, 1, 2_000, undefined, 86_400_000);
    t.equal(outbox.get(intent.key)?.keyLifetimeMs, 86_400_000, 'the first attempt records it');
    outbox.recordAttempt(intent.seq, 2, 3_000, undefined, 172_800_000);
    t.equal(outbox.get(intent.key)?.keyLifetimeMs, 86_400_000, 'a longer one later: kept');
    outbox.recordAttempt(intent.seq, 3, 4_000, undefined, 3_600_000);
    t.equal(outbox.get(intent.key)?.keyLifetimeMs, 3_600_000, 'a shorter one: taken');
    outbox.recordAttempt(intent.seq, 4, 5_000);
    t.equal(outbox.get(intent.key)?.keyLifetimeMs, 3_600_000, 'none known: kept');
    outbox.close();
    const after = new DatabaseSync(file, { readOnly: true });
    t.equal(
      after.prepare(`select value from meta where name = 'schema_version'`).get()?.['value'],
      '6',
    );
    t.equal(before.length, 1);
    after.close();
  },
);

void t.test(
  'a version 5 file is migrated in place: the equal-intent guard index also holds intents that may have taken effect',
  async (t) => {
    const file = await tempFile(t);
    const outbox = Outbox.open(file);
    outbox.enqueue(transferIntent({ from_account_id: ID_A, to_account_id: ID_B, amount: 5 }));
    outbox.close();
    // Taken back to version 5: its index left out the failed intents.
    const v5 = new DatabaseSync(file);
    v5.exec(`drop index intents_unreported;
create index intents_unreported on intents (operation, path, method, body)
  where state = 'pending' or reported_at is null;
update meta set value = '5' where name = 'schema_version';`);
    v5.close();
    const before = snapshot(file);
    Outbox.open(file).close();
    const after = new DatabaseSync(file, { readOnly: true });
    t.equal(
      after.prepare(`select value from meta where name = 'schema_version'`).get()?.['value'],
      '6',
    );
    const index = after
      .prepare(`select sql from sqlite_master where type = 'index' and name = 'intents_unreported'`)
      .get()?.['sql'];
    t.match(String(index), /failure in \('outcome_unknown', 'expired'\)/);
    after.close();
    t.same(snapshot(file).intents, before.intents, 'every row kept');
  },
);
