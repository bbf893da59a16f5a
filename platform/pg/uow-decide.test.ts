/**
 * `decide` over PostgreSQL: the function says with its value whether its
 * writes are kept, and the unit of work commits, rolls back (to the
 * savepoint when nested) or reports a failed commit with that value,
 * without a thrown sentinel and without state of the caller's.
 */
import t, { type Test } from 'tap';
import { testDatabase } from '../../test/harness/db.js';
import { testUnitOfWork, type TestUnitOfWorkOptions } from '../../test/harness/uow.js';

async function setup(t: Test, options: TestUnitOfWorkOptions = {}) {
  const tdb = await testDatabase(t);
  await tdb.owner`create table probe (id int primary key, v text)`;
  await tdb.owner.unsafe(`grant select, insert, update, delete on probe to ${tdb.state.app.name}`);
  const { db, uow } = testUnitOfWork(t, tdb, {
    applicationName: 'uow-decide',
    max: 1,
    backoffBaseMs: 1,
    ...options,
  });
  const rows = async () =>
    (await tdb.owner<{ id: number }[]>`select id from probe order by id`).map((r) => r.id);
  return { db, uow, rows };
}

void t.test('keep: false rolls back, hands the value back, and is not retried', async (t) => {
  const { db, uow, rows } = await setup(t);
  let runs = 0;
  const decided = await uow.decide(async () => {
    runs++;
    await db.sql()`insert into probe values (1, 'discarded')`;
    return { keep: false, value: 'the answer' };
  });
  t.same(decided, { kind: 'discarded', value: 'the answer' });
  t.equal(runs, 1, 'a rollback asked for is no failure to retry');
  t.same(await rows(), [], 'nothing committed');
  // The pool has one connection: the next unit of work gets it back.
  await uow.run(() => db.sql()`insert into probe values (2, 'kept')`);
  t.same(await rows(), [2], 'the connection went back to the pool');
});

void t.test('keep: true commits and hands the value back', async (t) => {
  const { db, uow, rows } = await setup(t);
  const decided = await uow.decide(async () => {
    await db.sql()`insert into probe values (1, 'kept')`;
    return { keep: true, value: 42 };
  });
  t.same(decided, { kind: 'kept', value: 42 });
  t.same(await rows(), [1]);
});

void t.test('nested, keep: false rolls back to the savepoint only', async (t) => {
  const { db, uow, rows } = await setup(t);
  const inner = await uow.run(async () => {
    await db.sql()`insert into probe values (1, 'outer')`;
    const decided = await uow.decide(
      async () => {
        await db.sql()`insert into probe values (2, 'inner')`;
        return { keep: false, value: 'inner value' };
      },
      { nested: true },
    );
    await db.sql()`insert into probe values (3, 'after')`;
    return decided;
  });
  t.same(inner, { kind: 'discarded', value: 'inner value' });
  t.same(await rows(), [1, 3], 'the savepoint rolled back, the outer transaction committed');
});

void t.test('joined without nested, keep: false still rolls back what it did', async (t) => {
  const { db, uow, rows } = await setup(t);
  const inner = await uow.run(async () => {
    await db.sql()`insert into probe values (1, 'outer')`;
    // No `nested`: a discard that left its writes in the outer transaction
    // would be reported as rolled back while it commits.
    const decided = await uow.decide(async () => {
      await db.sql()`insert into probe values (2, 'inner')`;
      return { keep: false, value: 'inner value' };
    });
    await db.sql()`insert into probe values (3, 'after')`;
    return decided;
  });
  t.same(inner, { kind: 'discarded', value: 'inner value' });
  t.same(await rows(), [1, 3], 'the discarded write is gone, the outer ones committed');
});

void t.test('nested, keep: true releases the savepoint into the outer transaction', async (t) => {
  const { db, uow, rows } = await setup(t);
  const decided = await uow.decide(async () => {
    const inner = await uow.decide(
      async () => {
        await db.sql()`insert into probe values (1, 'inner')`;
        return { keep: true, value: 'kept inside' };
      },
      { nested: true },
    );
    return { keep: false, value: inner };
  });
  t.same(decided, { kind: 'discarded', value: { kind: 'kept', value: 'kept inside' } });
  t.same(await rows(), [], 'the outer rollback took the released savepoint with it');
});

void t.test(
  'a commit that fails after keep: true is commit_failed, with the value and the error',
  async (t) => {
    const { db, uow, rows } = await setup(t, {
      retryMax: 2,
      faultHook: () => '23514',
    });
    let runs = 0;
    const decided = await uow.decide(async () => {
      runs++;
      await db.sql()`insert into probe values (1, 'doomed')`;
      return { keep: true, value: 'meant to keep' };
    });
    t.equal(decided.kind, 'commit_failed');
    t.equal(decided.value, 'meant to keep');
    t.match(decided.kind === 'commit_failed' ? decided.error : undefined, { code: '23514' });
    t.equal(runs, 1, 'a check violation is not retried');
    t.same(await rows(), []);
  },
);

void t.test('a retryable commit failure runs the function again, then commits', async (t) => {
  let faults = 1;
  const { db, uow, rows } = await setup(t, {
    faultHook: () => (faults-- > 0 ? '40001' : undefined),
  });
  let runs = 0;
  const decided = await uow.decide(async () => {
    runs++;
    await db.sql()`insert into probe values (1, ${`run ${String(runs)}`})`;
    return { keep: true, value: runs };
  });
  t.same(decided, { kind: 'kept', value: 2 }, 'the value of the run that committed');
  t.same(await rows(), [1]);
});

void t.test('keep: false never meets the commit fault hook', async (t) => {
  let asked = 0;
  const { uow } = await setup(t, {
    faultHook: () => {
      asked++;
      return '23514';
    },
  });
  const decided = await uow.decide(() => Promise.resolve({ keep: false, value: null }));
  t.same(decided, { kind: 'discarded', value: null });
  t.equal(asked, 0, 'a rollback has no commit to fail');
});

void t.test('what the function throws still rejects, after the rollback', async (t) => {
  const { db, uow, rows } = await setup(t);
  await t.rejects(
    uow.decide(async () => {
      await db.sql()`insert into probe values (1, 'x')`;
      throw new Error('boom');
    }),
    /boom/,
  );
  t.same(await rows(), []);
});

void t.test(
  'keep: false after a failed statement fn answered for: discarded with its value, nested and outermost',
  async (t) => {
    const { db, uow, rows } = await setup(t);
    await uow.run(() => db.sql()`insert into probe values (1, 'first')`);
    const duplicateInsert = async () => {
      try {
        await db.sql()`insert into probe values (1, 'again')`;
        return { keep: true, value: 'unreachable' };
      } catch {
        // A handler that turns the unique violation into its final 409.
        return { keep: false, value: '409 conflict' };
      }
    };
    const nested = await uow.run(async () => {
      const decided = await uow.decide(duplicateInsert, { nested: true });
      await db.sql()`insert into probe values (2, 'after the savepoint')`;
      return decided;
    });
    t.same(nested, { kind: 'discarded', value: '409 conflict' }, 'nested');
    t.same(
      await uow.decide(duplicateInsert),
      { kind: 'discarded', value: '409 conflict' },
      'outermost',
    );
    t.same(await rows(), [1, 2], 'the outer transaction went on after the savepoint');
  },
);
