/**
 * The unit of work when the connection under a transaction fails at the
 * worst moments: while statements wait in postgres.js's own queue at the
 * COMMIT, on a TCP reset, with an error that only looks like a lost
 * connection, and while the pool is closing. Each must settle, commit
 * nothing half, and leave the pool serving. The waits below detect hangs
 * (a run that never settles); they measure no speed.
 */
import net from 'node:net';
import t, { type Test } from 'tap';
import { testDatabase, type TestDatabase } from '../../test/harness/db.js';
import { startForwarder, type Forwarder } from '../../test/harness/forwarder.js';
import { createSql } from './client.js';
import { PgDatabase, PgUnitOfWork } from './uow.js';

const timeouts = { lockTimeoutMs: 5000, statementTimeoutMs: 30000, transactionTimeoutMs: 60000 };

/** A pool of one connection (through a forwarder when asked) and its unit of work. */
async function setup(t: Test, options: { forwarded?: boolean } = {}) {
  const tdb: TestDatabase = await testDatabase(t);
  await tdb.owner`create table probe (id int primary key, v text)`;
  await tdb.owner.unsafe(`grant select, insert, update, delete on probe to ${tdb.state.app.name}`);
  let forwarder: Forwarder | undefined;
  const url = new URL(tdb.appUrl);
  if (options.forwarded === true) {
    forwarder = await startForwarder(Number(url.port));
    t.teardown(() => forwarder?.close());
    url.port = String(forwarder.port);
  }
  const pool = createSql(options.forwarded === true ? url.toString() : tdb.appUrl, {
    max: 1,
    applicationName: 'uow-faults',
  });
  t.teardown(() => pool.end({ timeout: 1 }));
  const db = new PgDatabase(pool);
  const uow = new PgUnitOfWork(db, { ...timeouts, retryMax: 0, backoffBaseMs: 1 });
  const admin = createSql(tdb.adminUrl, { max: 1, applicationName: 'uow-faults-admin' });
  t.teardown(() => admin.end({ timeout: 1 }));
  const count = async () =>
    Number((await tdb.owner<{ n: string }[]>`select count(*) as n from probe`)[0]?.n);
  return { tdb, pool, db, uow, admin, count, forwarder };
}

/** Whether a promise settles within the given time, and how. */
function within<T>(p: Promise<T>, ms: number): Promise<{ settled: boolean; value?: unknown }> {
  return Promise.race([
    p.then(
      (value) => ({ settled: true, value }),
      (error: unknown) => ({ settled: true, value: error }),
    ),
    new Promise<{ settled: boolean }>((r) =>
      setTimeout(() => {
        r({ settled: false });
      }, ms).unref(),
    ),
  ]);
}

void t.test(
  'a connection killed while the statements sent with the COMMIT wait in the driver queue: the run rejects, nothing commits',
  async (t) => {
    const { db, uow, admin, count } = await setup(t);
    await admin`select 1`; // connected before the kill is due
    let pid = 0;
    const run = uow.run(async () => {
      const [me] = await db.sql()<{ pid: number }[]>`select pg_backend_pid() as pid`;
      pid = me!.pid;
      await db.sql()`insert into probe values (1, 'effect')`;
      // New on this connection, so postgres.js describes it first and queues
      // what follows (the settings, the COMMIT) in its own queue.
      db.sendWithCommit('a slow tail', (tx) =>
        tx`select pg_sleep(${3}::float8) as slept`.execute(),
      );
    });
    // Once the session is known and the sleeping statement sent (a loaded
    // machine may take longer than any fixed delay to get there).
    void (async () => {
      while (pid === 0) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 200));
      await admin`select pg_terminate_backend(${pid})`.catch(() => undefined);
    })();
    const outcome = await within(run, 5_000);
    t.ok(outcome.settled, 'the run settles');
    // The COMMIT waits in the driver's queue behind the sleeping statement
    // (written only once it is answered, after 3 s): it never reached
    // the server, so the outcome is known, not unknown.
    t.match(outcome.value, { code: /^(57P01|CONNECTION_CLOSED)$/ }, 'with the lost connection');
    t.equal(await count(), 0, 'nothing committed');
    // postgres.js may hand the FATAL of the lost session to the first query
    // issued before the socket closed (so with its own begin() too): the
    // pool serves the one after it.
    const pool = db.poolOutsideTransaction('probe');
    const next = pool`select 1 as one`.catch(() => pool`select 1 as one`);
    t.same(await within(next, 3_000), { settled: true, value: [{ one: 1 }] });
  },
);

for (const nested of [false, true]) {
  void t.test(
    `a TCP reset under a running statement${nested ? ' in a savepoint' : ''}: the run rejects and the pool answers each query with its own rows`,
    async (t) => {
      const { db, uow, pool, forwarder, count } = await setup(t, { forwarded: true });
      const work = async () => {
        await db.sql()`select pg_sleep(1)`;
      };
      const run = uow.run(async () => {
        await db.sql()`insert into probe values (1, 'outer')`;
        if (nested) await uow.run(work, { nested: true });
        else await work();
      });
      setTimeout(() => forwarder?.reset(), 300);
      const outcome = await within(run, 5_000);
      t.ok(outcome.settled, 'the run settles');
      t.ok(outcome.value instanceof Error, 'it rejected');
      const a = await within(pool`select 'A' as a`, 3_000);
      const b = await within(pool`select 'B' as b`, 3_000);
      t.same(a, { settled: true, value: [{ a: 'A' }] }, 'the first query after the reset');
      t.same(b, { settled: true, value: [{ b: 'B' }] }, 'the second one');
      t.equal(await count(), 0);
    },
  );
}

void t.test(
  'an ERROR whose SQLSTATE names a lost connection, on a live session, rolls back and hands the connection back',
  async (t) => {
    const { db, uow, pool, admin, count } = await setup(t);
    const first = await within(
      uow.run(async () => {
        await db.sql()`insert into probe values (1, 'rolled back')`;
        await db.sql()`do $$ begin raise exception 'a remote server went away' using errcode = '08006'; end $$`;
      }),
      3_000,
    );
    t.ok(first.settled, 'the run settles');
    t.match(first.value, { code: '08006' });
    const activity = await admin<{ state: string }[]>`
      select state from pg_stat_activity where application_name = 'uow-faults'`;
    t.same(
      activity.map((a) => a.state),
      ['idle'],
      'the session is idle, not in a transaction',
    );
    t.same(await within(pool`select 1 as one`, 3_000), { settled: true, value: [{ one: 1 }] });
    t.equal(await count(), 0);
  },
);

void t.test(
  'closing the database while a unit of work runs: it commits, and the close ends at once',
  async (t) => {
    const { db, uow, count } = await setup(t);
    const run = uow.run(async () => {
      await db.sql()`insert into probe values (1, 'effect')`;
      await new Promise((r) => setTimeout(r, 300));
    });
    await new Promise((r) => setTimeout(r, 100));
    // Without a timeout: it would wait for a connection handed back forever.
    const closed = within(db.close(), 3_000);
    t.ok((await within(run, 3_000)).settled, 'the run settles');
    t.equal(await count(), 1, 'committed');
    t.same(await closed, { settled: true, value: undefined }, 'the close ended');
  },
);

void t.test(
  "postgres.js drops a reservation that a closing connection takes as its next query: the driver's own behaviour, kept as the reproduction",
  async (t) => {
    const { pool, forwarder } = await setup(t, { forwarded: true });
    // The only connection is busy; a reservation queues behind it.
    const busy = pool`select pg_sleep(30)`.catch((err: unknown) => err);
    await new Promise((r) => setTimeout(r, 100));
    const reservation = pool.reserve();
    await new Promise((r) => setTimeout(r, 50));
    // The busy connection is cut: postgres.js reconnects it with the queued
    // reservation as its first query, then drops that reservation
    // (connection.js, ReadyForQuery: `initial.reserve && (initial = null)`)
    // assuming it is still queued, while onclose had already taken it out.
    forwarder?.switchTo(forwarder.target);
    await busy;
    const got = await within(reservation, 1500);
    t.equal(got.settled, false, 'the reservation never settles (postgres.js 3.4.9)');
    const next = await within(pool`select 1 as one`, 1500);
    t.equal(next.settled, true, 'the pool itself still answers');
  },
);

void t.test(
  "postgres.js hands out a reserved connection released after its close, and its next statement throws outside any promise: the driver's own behaviour, kept as the reproduction",
  async (t) => {
    const tdb = await testDatabase(t);
    const uncaught: string[] = [];
    const onUncaught = (err: Error): void => {
      uncaught.push(err.message);
    };
    // What would end the process: kept here so the test can report it.
    const listeners = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    process.on('uncaughtException', onUncaught);
    t.teardown(() => {
      process.off('uncaughtException', onUncaught);
      for (const l of listeners) process.on('uncaughtException', l);
    });
    const pool = createSql(tdb.appUrl, { max: 1, applicationName: 'uow-faults-release' });
    t.teardown(() => pool.end({ timeout: 1 }));
    const reserved = await pool.reserve();
    const [me] = await reserved<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const admin = createSql(tdb.adminUrl, { max: 1, applicationName: 'uow-faults-admin' });
    await admin`select pg_terminate_backend(${me?.pid ?? 0})`;
    await admin.end({ timeout: 1 });
    await new Promise((r) => setTimeout(r, 300));
    reserved.release();
    const again = await pool.reserve();
    const got = await within(again`select 1 as one`.execute(), 1000);
    t.equal(got.settled, false, 'the statement never settles (postgres.js 3.4.9)');
    t.match(uncaught, [/Cannot read properties of null \(reading 'write'\)/], 'and it threw');
  },
);

void t.test(
  'a unit of work waiting for a connection when one closes still runs: the reservation the driver drops is asked again',
  async (t) => {
    const { pool, uow, db, forwarder, count } = await setup(t, { forwarded: true });
    const busy = pool`select pg_sleep(30)`.catch((err: unknown) => err);
    await new Promise((r) => setTimeout(r, 100));
    const run = uow.run(async () => {
      await db.sql()`insert into probe values (1, 'after the close')`;
      return 'ran';
    });
    await new Promise((r) => setTimeout(r, 50));
    forwarder?.switchTo(forwarder.target);
    await busy;
    const got = await within(run, 3000);
    t.same(got, { settled: true, value: 'ran' }, 'the run settles with its value');
    t.equal(await count(), 1, 'its write committed once');
  },
);

void t.test('a connect the server never answers fails within the connect timeout', async (t) => {
  // A listener that accepts the TCP connection and never says a word, as a
  // server behind a dead proxy or under a SYN flood would.
  const silent = net.createServer(() => undefined);
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const port = (silent.address() as net.AddressInfo).port;
  t.teardown(() => {
    silent.close();
  });
  const pool = createSql(`postgres://nobody:secret@127.0.0.1:${String(port)}/none`, {
    max: 1,
    applicationName: 'uow-faults-silent',
    connectTimeoutMs: 300,
  });
  t.teardown(() => pool.end({ timeout: 0 }));
  const got = await within(pool`select 1`, 3000);
  t.equal(got.settled, true, 'the query settles');
  t.match(got.value, { code: 'CONNECT_TIMEOUT' }, 'with the connect timeout');
});

void t.test(
  'a statement made in a unit of work and sent after it ended is refused, never run outside it or in the next one',
  async (t) => {
    const { db, uow, count } = await setup(t);
    let late: PromiseLike<unknown> | undefined;
    await t.rejects(
      uow.run(() => {
        // Made, not sent: postgres.js sends a statement when it is awaited.
        late = db.sql()`insert into probe values (1, 'made in a rolled back unit')`;
        return Promise.reject(new Error('roll back'));
      }),
      /roll back/,
    );
    // The next unit of work takes the same (only) connection.
    const next = uow.run(async () => {
      await db.sql()`insert into probe values (2, 'the next unit')`;
      await t.rejects(
        Promise.resolve(late),
        { name: 'TransactionEndedError' },
        'refused when sent',
      );
    });
    await next;
    t.equal(await count(), 1, 'only the next unit wrote');
  },
);

void t.test(
  "a statement of a savepoint sent after the savepoint's run is refused, so a rolled back savepoint keeps nothing",
  async (t) => {
    const { db, uow, tdb } = await setup(t);
    let late: PromiseLike<unknown> | undefined;
    await uow.run(async () => {
      await t.rejects(
        uow.run(
          () => {
            late = db.sql()`insert into probe values (1, 'made in the savepoint')`;
            return Promise.reject(new Error('roll back to the savepoint'));
          },
          { nested: true },
        ),
        /roll back to the savepoint/,
      );
      await t.rejects(
        Promise.resolve(late),
        { name: 'TransactionEndedError' },
        'refused when sent',
      );
      await db.sql()`insert into probe values (2, 'the outer unit')`;
    });
    const rows = await tdb.owner<{ id: number }[]>`select id from probe order by id`;
    t.same(
      rows.map((r) => r.id),
      [2],
      "the savepoint's late statement did not commit with the outer unit",
    );
  },
);

void t.test(
  'units of work waiting while the database refuses connections fail with the refusal, not their deadline',
  async (t) => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) =>
      closed.close(() => {
        resolve();
      }),
    );
    const pool = createSql(`postgres://nobody:secret@127.0.0.1:${String(port)}/none`, {
      max: 4,
      applicationName: 'uow-faults-refused',
    });
    t.teardown(() => pool.end({ timeout: 0 }));
    const db = new PgDatabase(pool);
    // A deadline far beyond the wait below: only a refusal settles in time.
    const uow = new PgUnitOfWork(db, { ...timeouts, transactionTimeoutMs: 40_000, retryMax: 0 });
    const runs = Array.from({ length: 40 }, () => uow.run(() => Promise.resolve('ran')));
    const ended = await Promise.all(runs.map((run) => within(run, 15_000)));
    t.equal(ended.filter((e) => !e.settled).length, 0, 'every unit of work settled');
    t.same(
      [...new Set(ended.map((e) => (e.value as { code?: unknown } | undefined)?.code))],
      ['ECONNREFUSED'],
      'each with the refusal',
    );
  },
);
