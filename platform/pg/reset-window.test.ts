/**
 * A statement made on a connection in the window a TCP reset opens (the
 * driver has heard ECONNRESET, not yet the socket's close). postgres.js
 * 3.4.9 keeps such a statement as its connection's current query, and the
 * next session's start-up answer resolves it with an empty result: "no
 * rows", which the caller would read as a bad token (401) or a missing row
 * (404). Through PgDatabase it must fail as a lost connection instead.
 */
import t from 'tap';
import { testDatabase } from '../../test/harness/db.js';
import { resettablePool } from '../../test/harness/reset-window.js';
import { checkedResult, PgDatabase, PgUnitOfWork, UnansweredResultError } from './uow.js';

const timeouts = { lockTimeoutMs: 5000, statementTimeoutMs: 30000, transactionTimeoutMs: 60000 };

/** How a promise settled within the given time, without throwing. */
async function within(p: PromiseLike<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string>((resolve) => {
    timer = setTimeout(() => {
      resolve('pending');
    }, ms);
  });
  const settled = Promise.resolve(p).then(
    (v) => `resolved ${JSON.stringify(v)}`,
    (err: unknown) => `rejected ${String((err as { code?: unknown }).code)}`,
  );
  const outcome = await Promise.race([settled, timeout]);
  clearTimeout(timer);
  return outcome;
}

void t.test(
  "postgres.js answers a statement made between a reset and the close with an empty result: the driver's own behaviour, kept as the reproduction",
  async (t) => {
    const tdb = await testDatabase(t);
    const { sql, reset } = resettablePool(t, tdb.appUrl, 1, { bare: true });
    await sql`select 1`;
    let made: PromiseLike<unknown> | undefined;
    await reset(() => {
      made = sql`select 'mine' as tag`.execute();
    });
    // The next statement reconnects the connection; its start-up answer
    // settles the one made in the window.
    t.equal(await within(sql`select 'next' as tag`, 3000), 'resolved [{"tag":"next"}]');
    const result = (await made) as unknown[] & { command?: unknown };
    t.same([...result], [], 'no rows, though the statement returns one (postgres.js 3.4.9)');
    t.equal(result.command, null, 'and no CommandComplete answered it');
  },
);

void t.test(
  'a pool statement made between a reset and the close hears the reset, and the pool goes on',
  async (t) => {
    const tdb = await testDatabase(t);
    const { sql, reset } = resettablePool(t, tdb.appUrl);
    const db = new PgDatabase(sql);
    await db.sql()`select 1`;
    let made: PromiseLike<unknown> | undefined;
    await reset(() => {
      // Awaited in the window, as an `await` in a request's code would be.
      made = Promise.resolve(db.sql()`select 'mine' as tag`);
    });
    t.equal(await within(made!, 3000), 'rejected ECONNRESET', 'a lost connection, never "no rows"');
    t.equal(await within(db.sql()`select 'next' as tag`, 3000), 'resolved [{"tag":"next"}]');
  },
);

void t.test(
  'where the driver hears the reset before the close (its own sockets, a pool over TLS), a pool statement made between them fails as unanswered',
  async (t) => {
    const tdb = await testDatabase(t);
    const { sql, reset } = resettablePool(t, tdb.appUrl, 1, { bare: true });
    const db = new PgDatabase(sql);
    await db.sql()`select 1`;
    let made: PromiseLike<unknown> | undefined;
    await reset(() => {
      made = Promise.resolve(db.sql()`select 'mine' as tag`);
    });
    const next = within(db.sql()`select 'next' as tag`, 3000);
    t.equal(await within(made!, 3000), 'rejected RESULT_UNANSWERED', 'never "no rows"');
    t.equal(await next, 'resolved [{"tag":"next"}]', 'the next statement has its own answer');
  },
);

for (const bare of [false, true]) {
  void t.test(
    `a statement of a unit of work made between a reset and the close never reads as "no rows" (${bare ? "the driver's own sockets" : 'our pool'})`,
    async (t) => {
      const tdb = await testDatabase(t);
      const { sql, reset } = resettablePool(t, tdb.appUrl, 1, { bare });
      const db = new PgDatabase(sql);
      const uow = new PgUnitOfWork(db, { ...timeouts, retryMax: 0, backoffBaseMs: 1 });
      let made: Promise<string> | undefined;
      const run = uow.run(async () => {
        await db.sql()`select 1`;
        await reset(() => {
          made = within(db.sql()`select 'mine' as tag`, 10_000);
        });
        return await made;
      });
      // The run ends at the close. Where the driver kept the statement
      // made in the window, only the next session's start-up settles it,
      // and the next statement opens that session.
      t.equal(await within(run, 10_000), 'rejected CONNECTION_CLOSED', 'the run ends at the close');
      t.equal(await within(db.sql()`select 'next' as tag`, 3000), 'resolved [{"tag":"next"}]');
      t.equal(
        await made,
        bare ? 'rejected RESULT_UNANSWERED' : 'rejected ECONNRESET',
        'the statement never reads as "no rows"',
      );
    },
  );
}

void t.test('a result no CommandComplete answered is refused, never read', (t) => {
  const unanswered = Object.defineProperty([], 'command', { value: null });
  t.throws(() => checkedResult(unanswered), UnansweredResultError);
  t.throws(() => checkedResult(unanswered), { code: 'RESULT_UNANSWERED' });
  const none = Object.defineProperty([], 'command', { value: 'SELECT' });
  t.equal(checkedResult(none), none, 'a SELECT of no rows is an answer');
  // The list of results of several statements sent as one text is a
  // plain array; each of its results carries its own command.
  const several = [Object.defineProperty([], 'command', { value: 'UPDATE' })];
  t.equal(checkedResult(several), several);
  t.end();
});

for (const bare of [false, true]) {
  void t.test(
    `a pool statement queued on a busy connection between a reset and the close ends in its bound, and so does the next unit of work (${bare ? "the driver's own sockets" : 'our pool'})`,
    async (t) => {
      const tdb = await testDatabase(t);
      const { sql, reset } = resettablePool(t, tdb.appUrl, 2, { bare });
      const db = new PgDatabase(sql, { statementDeadlineMs: 3000 });
      const uow = new PgUnitOfWork(db, {
        ...timeouts,
        transactionTimeoutMs: 2000,
        retryMax: 0,
        backoffBaseMs: 1,
      });
      await Promise.all([db.sql()`select 1`, db.sql()`select 1`]);
      // Both connections busy, so statements made now are queued behind them.
      const busy = [
        within(db.sql()`select pg_sleep(1.5)`, 5000),
        within(db.sql()`select pg_sleep(1.5)`, 5000),
      ];
      await new Promise((r) => setTimeout(r, 200));
      const made: Promise<string>[] = [];
      await reset(() => {
        // One lands on each busy connection: postgres.js keeps the one on the
        // reset connection in its list of statements sent, across the reconnect.
        made.push(within(db.sql()`select 'first' as tag`, 10_000));
        made.push(within(db.sql()`select 'second' as tag`, 10_000));
      }, 0);
      t.same(
        (await Promise.all(busy)).sort(),
        ['rejected ECONNRESET', 'resolved [{"pg_sleep":""}]'],
        'the statement on the reset connection hears the reset, the other is answered',
      );
      t.equal(made.length, 2, 'two statements were made in the window');
      const queued = await Promise.all(made);
      t.notOk(queued.includes('pending'), `the queued statements ended (${queued.join(', ')})`);
      if (!bare) {
        // Held back to the close, the reset reaches the one on the reset
        // connection: no statement is kept, and none waits for its deadline.
        t.same(
          queued.map((q) => q.replace(/"(first|second)"/, '"..."')).sort(),
          ['rejected ECONNRESET', 'resolved [{"tag":"..."}]'],
          'the one on the reset connection hears the reset, the other is answered',
        );
      }
      const run = await within(
        uow.run(async () => (await db.sql()`select 'in the run' as tag`)[0]),
        8000,
      );
      if (bare) t.not(run, 'pending', `the next unit of work ended in its bound (${run})`);
      else t.equal(run, 'resolved {"tag":"in the run"}', 'the next unit of work is answered');
    },
  );
}

for (const hostList of [false, true]) {
  void t.test(
    `a connection reset while busy serves again: what was made before the close hears the reset, and the reconnected connection answers every statement after (${hostList ? 'a pool over a host list' : 'a pool over one host'})`,
    async (t) => {
      const tdb = await testDatabase(t);
      const { sql, reset } = resettablePool(t, tdb.appUrl, 1, { hostList });
      await sql`select 1`;
      const busy = within(sql`select pg_sleep(1.5)`, 5000);
      await new Promise((r) => setTimeout(r, 200));
      let made: Promise<string> | undefined;
      await reset(() => {
        made = within(sql`select 'kept' as tag`, 4000);
      });
      t.equal(await busy, 'rejected ECONNRESET', 'the statement in flight hears the reset');
      t.equal(await made, 'rejected ECONNRESET', 'and so does the one made before the close');
      // The next statement reconnects the connection; a statement the driver
      // kept would become its current query after it, and nothing after
      // would ever be answered.
      t.equal(await within(sql`select 'next' as tag`, 3000), 'resolved [{"tag":"next"}]');
      t.equal(await within(sql`select 'again' as tag`, 3000), 'resolved [{"tag":"again"}]');
    },
  );
}

void t.test('the harness refuses a closed socket and rethrows what the window threw', async (t) => {
  const tdb = await testDatabase(t);
  const { sql, reset } = resettablePool(t, tdb.appUrl);
  await sql`select 1`;
  await t.rejects(
    reset(() => {
      throw new Error('thrown in the window');
    }),
    { message: 'thrown in the window' },
  );
  // The socket it reset is closed: a second reset would wait forever.
  await t.rejects(
    reset(() => undefined, 0),
    { message: 'socket 0 is closed already' },
  );
});
