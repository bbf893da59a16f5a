/**
 * The outbox's schema versions on real files: a file of schema version 1
 * (made here with that version's own SQL, as the client of then wrote it)
 * is migrated to version 6 when it is opened, in one transaction, with
 * every row kept as it was; a migration that meets a broken foreign key is
 * refused and leaves the file as it was.
 */
import { DatabaseSync } from 'node:sqlite';
import t from 'tap';
import { Outbox, OutboxOpenError } from './outbox.js';
import { BODY, KEYS, V1_COLUMNS, V1_SCHEMA, snapshot, tempFile } from './outbox-schema-fixture.js';

/** A version 1 file with a pending, two done, a failed and a removed intent. */
function writeV1(file: string): void {
  const db = new DatabaseSync(file);
  db.exec('pragma journal_mode = wal');
  db.exec(V1_SCHEMA);
  const insert = db.prepare(
    `insert into intents (key, operation, method, path, body, lanes, created_at, state, failure,
       attempts, next_attempt_at, last_error, status, replayed, answer_headers, answer_body, finished_at)
     values (?, 'createTransfer', 'POST', '/api/v1/transfers', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const lanes = '["account:a","account:b"]';
  insert.run(
    KEYS[0] ?? '',
    BODY,
    lanes,
    1_000,
    'pending',
    null,
    2,
    5_000,
    '503 service_unavailable',
    null,
    null,
    null,
    null,
    null,
  );
  insert.run(
    KEYS[1] ?? '',
    BODY,
    lanes,
    1_100,
    'done',
    null,
    1,
    0,
    null,
    201,
    1,
    '{"location":"/api/v1/transfers/t"}',
    '{"id":"t"}',
    1_200,
  );
  insert.run(
    KEYS[2] ?? '',
    BODY,
    '[]',
    1_300,
    'done',
    null,
    1,
    0,
    null,
    409,
    0,
    '{}',
    '{"code":"conflict"}',
    1_400,
  );
  insert.run(
    KEYS[3] ?? '',
    null,
    '[]',
    1_500,
    'failed',
    'expired',
    3,
    0,
    'ECONNREFUSED',
    null,
    null,
    null,
    null,
    1_600,
  );
  insert.run(
    KEYS[4] ?? '',
    BODY,
    '[]',
    1_700,
    'pending',
    null,
    0,
    0,
    null,
    null,
    null,
    null,
    null,
    null,
  );
  db.exec(`delete from intents where seq = 5`);
  const lane = db.prepare('insert into intent_lanes (lane, seq) values (?, ?)');
  for (const seq of [1, 2]) {
    lane.run('account:a', seq);
    lane.run('account:b', seq);
  }
  db.exec(`insert into meta (name, value) values ('principal_id', 'p1')`);
  db.close();
}

void t.test('a version 1 file is migrated on open with its rows unchanged', async (t) => {
  const file = await tempFile(t);
  writeV1(file);
  const db = new DatabaseSync(file);
  const before = {
    intents: db.prepare(`select ${V1_COLUMNS} from intents order by seq`).all(),
    lanes: db.prepare('select lane, seq from intent_lanes order by seq, lane').all(),
  };
  db.close();

  const outbox = Outbox.open(file);
  t.same(
    outbox.storage(),
    { journalMode: 'wal', synchronous: 'full', lockingMode: 'exclusive', foreignKeys: true },
    'foreign keys are on again after the migration',
  );
  t.equal(outbox.principal(), 'p1');
  t.equal(outbox.highWater(), 1_600, 'the latest time the rows recorded');
  // t.match on an array ignores extra elements: the length is checked too.
  t.equal(outbox.list().length, 4, 'the four rows, no more');
  t.match(outbox.list(), [
    {
      seq: 1,
      key: KEYS[0],
      state: 'pending',
      attempts: 2,
      nextAttemptAt: 5_000,
      lastError: '503 service_unavailable',
      lanes: ['account:a', 'account:b'],
      // Version 1 did not count an attempt cut off by a crash, so a pending
      // row may have one behind it.
      attemptStartedAt: 1_000,
      answer: null,
    },
    {
      seq: 2,
      state: 'done',
      answer: { status: 201, replayed: true, marked: true, body: '{"id":"t"}' },
      finishedAt: 1_200,
    },
    {
      seq: 3,
      state: 'done',
      answer: { status: 409, replayed: false, marked: null },
    },
    { seq: 4, state: 'failed', failure: 'expired', answer: null, attempts: 3, reportedAt: 1_600 },
  ]);
  t.same(
    outbox.ready(10_000, new Set(), 10).map((i) => i.seq),
    [1],
    'the pending intent heads its lanes as before',
  );
  const next = outbox.enqueue({ operation: 'x', method: 'POST', path: '/x', lanes: [] }).intent;
  t.equal(next.seq, 6, 'sequence numbers go on after the largest ever used');
  outbox.recordFinal(1, {
    attempts: 3,
    state: 'failed',
    failure: 'outcome_unknown',
    answer: { status: 404, replayed: false, marked: false, headers: {}, body: '{}' },
    now: 9_000,
  });
  t.match(outbox.get(KEYS[0] ?? ''), { failure: 'outcome_unknown', answer: { marked: false } });
  outbox.close();

  const after = snapshot(file);
  t.same(
    after.intents.filter((r) => r['seq'] !== 1 && r['seq'] !== 6),
    before.intents.filter((r) => r['seq'] !== 1),
    'every other row is as it was, column by column',
  );
  t.same(after.lanes, before.lanes, 'the lanes are as they were');
  t.equal(after.version, '6');
  t.match(after.table, /outcome_unknown/, 'the new check allows the new reason');
  t.same(
    after.indexes.sort(),
    ['intents_pending', 'intents_unreported', 'sqlite_autoindex_intents_1'].sort(),
  );
  t.same(after.foreignKeyProblems, []);
  t.same(
    after.answers.slice(0, 4).map((r) => r['marked']),
    [0, 1, null, null],
    'a replay was marked; an earlier first answer is not known to have been',
  );
  const again = Outbox.open(file);
  t.equal(again.list().length, 5, 'a version 6 file opens without a migration');
  again.close();
});

void t.test('a migration that meets a broken foreign key leaves the file as it was', async (t) => {
  const file = await tempFile(t);
  writeV1(file);
  const db = new DatabaseSync(file, { enableForeignKeyConstraints: false });
  db.exec(`insert into intent_lanes (lane, seq) values ('account:z', 99)`);
  db.close();
  t.throws(() => Outbox.open(file), OutboxOpenError);
  t.throws(() => Outbox.open(file), {
    message: new RegExp(`${file}.*version 1.*intent_lanes.*foreign key`),
  });
  const kept = new DatabaseSync(file);
  t.equal(
    kept.prepare(`select value from meta where name = 'schema_version'`).get()?.['value'],
    '1',
    'still version 1',
  );
  t.match(
    String(kept.prepare(`select sql from sqlite_master where name = 'intents'`).get()?.['sql']),
    /'unexpected_answer'\)\)/,
    'the old table is in place',
  );
  t.equal(kept.prepare('select count(*) as n from intents').get()?.['n'], 4);
  kept.close();
});

void t.test('a new file has the version 6 schema', async (t) => {
  const file = await tempFile(t);
  const outbox = Outbox.open(file);
  const { intent } = outbox.enqueue({ operation: 'x', method: 'POST', path: '/x', lanes: [] });
  outbox.recordFinal(intent.seq, {
    attempts: 2,
    state: 'failed',
    failure: 'outcome_unknown',
    answer: { status: 403, replayed: false, marked: false, headers: {}, body: '{}' },
    now: 5,
  });
  t.match(outbox.get(intent.key), {
    state: 'failed',
    failure: 'outcome_unknown',
    answer: { status: 403, marked: false },
  });
  outbox.close();
  const s = snapshot(file);
  t.equal(s.version, '6');
  t.same(s.answers, [{ seq: 1, marked: 0, attempt_started_at: null }]);
});
