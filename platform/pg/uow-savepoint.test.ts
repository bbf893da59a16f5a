/**
 * Savepoints over PostgreSQL keep a transaction's work in order: a nested
 * unit of work started from a savepoint whose run is over is refused (its
 * writes would land in the outer transaction beside an answer that says
 * they were undone), two savepoints of one scope are never open at once
 * (one's rollback would take the other's writes), the scope that opened a
 * savepoint sends nothing while it is open, and a retryable failure caught
 * inside a discarded run still retries the whole function.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { OverlappingSavepointError } from '../../kernel/txn/index.js';
import { testDatabase } from '../../test/harness/db.js';
import { testUnitOfWork } from '../../test/harness/uow.js';
import { TransactionEndedError } from './transaction.js';

async function setup(t: Test) {
  const tdb = await testDatabase(t);
  await tdb.owner`create table probe (id int primary key, v text)`;
  await tdb.owner.unsafe(`grant select, insert, update, delete on probe to ${tdb.state.app.name}`);
  const { db, uow } = testUnitOfWork(t, tdb, {
    applicationName: 'uow-savepoint',
    max: 1,
    backoffBaseMs: 1,
  });
  const rows = async () =>
    (await tdb.owner<{ id: number }[]>`select id from probe order by id`).map((r) => r.id);
  return { db, uow, rows };
}

void t.test(
  'a decide started after its savepoint ended is refused and commits nothing',
  async (t) => {
    const { db, uow, rows } = await setup(t);
    let late: Promise<unknown> = Promise.resolve();
    await uow.run(async () => {
      await uow.decide(async () => {
        await db.sql()`insert into probe values (1, 'discarded')`;
        // Detached: it starts after this savepoint was rolled back.
        late = sleep(5)
          .then(() =>
            uow.decide(async () => {
              await db.sql()`insert into probe values (2, 'late')`;
              return { keep: false, value: null };
            }),
          )
          .then(
            () => 'ran',
            (err: unknown) => err,
          );
        return { keep: false, value: null };
      });
      await sleep(50);
    });
    t.type(await late, TransactionEndedError, 'the late decide is refused');
    t.same(await rows(), [], 'neither the discarded nor the late write committed');
  },
);

void t.test('two savepoints of one scope are never open at once', async (t) => {
  const { db, uow, rows } = await setup(t);
  const results = await uow.run(async () =>
    Promise.allSettled([
      uow.decide(async () => {
        await db.sql()`insert into probe values (1, 'a')`;
        await sleep(20);
        await db.sql()`insert into probe values (2, 'a')`;
        return { keep: true, value: 'a' };
      }),
      uow.decide(async () => {
        await db.sql()`insert into probe values (3, 'b')`;
        return { keep: false, value: 'b' };
      }),
    ]),
  );
  t.same(results[0], { status: 'fulfilled', value: { kind: 'kept', value: 'a' } });
  t.equal(results[1].status, 'rejected');
  t.type(results[1].status === 'rejected' ? results[1].reason : null, OverlappingSavepointError);
  t.same(await rows(), [1, 2], 'what was reported kept committed, and only that');
});

void t.test(
  'the scope that opened a savepoint sends nothing while it is open, and a refusal it caught fails it',
  async (t) => {
    const { db, uow, rows } = await setup(t);
    const seen: { parent?: unknown; child?: unknown } = {};
    await t.rejects(
      uow.run(async () => {
        await db.sql()`insert into probe values (3, 'before')`;
        const child = uow.decide(async () => {
          await sleep(20);
          await db.sql()`insert into probe values (1, 'child')`;
          return { keep: false, value: 'child' };
        });
        // Sent now it would run inside the child's savepoint and be rolled
        // back with it.
        seen.parent = await Promise.resolve()
          .then(() => db.sql()`insert into probe values (2, 'parent')`)
          .then(
            () => 'sent',
            (err: unknown) => err,
          );
        seen.child = await child;
        // The caller caught the refusal: committing now would keep 'before'
        // without the write it meant to make beside it.
      }),
      OverlappingSavepointError,
    );
    t.type(seen.parent, OverlappingSavepointError, "the parent's statement is refused");
    t.same(seen.child, { kind: 'discarded', value: 'child' });
    t.same(await rows(), [], 'nothing of the run commits');
  },
);

void t.test('a retryable failure caught in a discarded run retries the function', async (t) => {
  const { db, uow, rows } = await setup(t);
  let runs = 0;
  const decided = await uow.decide(async () => {
    runs++;
    await db.sql()`insert into probe values (${runs}, 'run')`;
    if (runs === 1) {
      // A handler that catches every error and answers a final 4xx: a
      // serialization failure is no answer to store.
      const caught =
        await db.sql()`do $$ begin raise exception 'conflict' using errcode = '40001'; end $$`.then(
          () => null,
          (err: unknown) => err,
        );
      t.match(caught, { code: '40001' });
      return { keep: false, value: 'a final 409' };
    }
    return { keep: true, value: 'committed' };
  });
  t.same(decided, { kind: 'kept', value: 'committed' });
  t.equal(runs, 2, 'the first run was retried');
  t.same(await rows(), [2]);
});

void t.test(
  'a savepoint that ends while one opened inside it still runs fails, and the late one writes nothing',
  async (t) => {
    const { db, uow, rows } = await setup(t);
    // The grandchild outlives its parent (detached), and would discard.
    let grandchild: unknown;
    await t.rejects(
      uow.run(async () => {
        await uow.decide(() => {
          void uow
            .decide(async () => {
              await sleep(30);
              await db.sql()`insert into probe values (9, 'grandchild')`;
              return { keep: false, value: 'g' };
            })
            .then(
              (d) => (grandchild = d),
              (e: unknown) => (grandchild = e),
            );
          return Promise.resolve({ keep: true, value: 'child' });
        });
        // Never reached: a verdict given over a savepoint still running is refused.
        await db.sql()`insert into probe values (1, 'parent')`;
      }),
      OverlappingSavepointError,
    );
    await sleep(60);
    t.type(grandchild, TransactionEndedError, "the late savepoint's statement is refused");
    t.same(await rows(), []);

    // The same with the parent discarding and the grandchild keeping: its
    // write would otherwise land in the outer transaction.
    let late: unknown;
    await t.rejects(
      uow.run(async () => {
        await uow.decide(async () => {
          await db.sql()`insert into probe values (1, 'child')`;
          void uow
            .decide(async () => {
              await sleep(20);
              await db.sql()`insert into probe values (2, 'grandchild')`;
              return { keep: true, value: 'g' };
            })
            .then(
              (d) => (late = d),
              (e: unknown) => (late = e),
            );
          return { keep: false, value: 'child' };
        });
        await sleep(60);
      }),
      OverlappingSavepointError,
    );
    await sleep(40);
    t.notSame(late, { kind: 'kept', value: 'g' }, 'never reported kept');
    t.same(await rows(), [], 'nothing commits');
  },
);

void t.test(
  'the outermost run ending while a savepoint of it still runs rolls back with its own error',
  async (t) => {
    const { db, uow, rows } = await setup(t);
    let late: unknown;
    // A decide, so that a commit reported failed (the outcome unknown to
    // the caller) shows apart from a rollback.
    await t.rejects(
      uow.decide(async () => {
        await db.sql()`insert into probe values (1, 'outer')`;
        void uow
          .decide(async () => {
            await sleep(20);
            await db.sql()`insert into probe values (2, 'late')`;
            return { keep: true, value: 'late' };
          })
          .then(
            (d) => (late = d),
            (e: unknown) => (late = e),
          );
        return { keep: true, value: 'outer' };
      }),
      OverlappingSavepointError,
    );
    await sleep(50);
    t.notSame(late, { kind: 'kept', value: 'late' });
    t.same(await rows(), [], 'rolled back, not reported as a failed commit');
  },
);

void t.test(
  'a joined decide whose fn throws at once, or resolves with no verdict, undoes its write',
  async (t) => {
    const { db, uow, rows } = await setup(t);
    const thrown = await uow.run(async () =>
      uow
        .decide(() => {
          void db.sql()`insert into probe values (1, 'inner')`.execute();
          throw new Error('sync');
        })
        .then(
          () => 'resolved',
          (err: unknown) => (err as Error).message,
        ),
    );
    t.equal(thrown, 'sync');
    const bad = await uow.run(async () =>
      uow
        .decide((async () => {
          await db.sql()`insert into probe values (2, 'inner')`;
          return undefined;
        }) as never)
        .then(
          () => 'resolved',
          (err: unknown) => (err as Error).name,
        ),
    );
    t.equal(bad, 'TypeError');
    t.same(await rows(), [], 'neither write commits');
  },
);
