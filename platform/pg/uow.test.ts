import t, { type Test } from 'tap';
import {
  PoolInsideTransactionError,
  TransactionRequiredError,
  markNonRetryable,
} from '../../kernel/txn/index.js';
import { testDatabase, type TestDatabase } from '../../test/harness/db.js';
import { startForwarder } from '../../test/harness/forwarder.js';
import { createSql, reconnectBackoff, type Sql } from './client.js';
import {
  checkedResult,
  IncompleteResultError,
  PgDatabase,
  PgUnitOfWork,
  TransactionAbortedError,
  TransactionEndedError,
  type PgUnitOfWorkOptions,
} from './uow.js';

const timeouts = { lockTimeoutMs: 5000, statementTimeoutMs: 30000, transactionTimeoutMs: 60000 };

async function setup(t: Test, options: Partial<PgUnitOfWorkOptions> = {}) {
  const tdb: TestDatabase = await testDatabase(t);
  await tdb.owner`create table probe (id int primary key, v text)`;
  await tdb.owner.unsafe(`grant select, insert, update, delete on probe to ${tdb.state.app.name}`);
  const pool = createSql(tdb.appUrl, { max: 4, applicationName: 'uow-test' });
  t.teardown(() => pool.end({ timeout: 1 }));
  const db = new PgDatabase(pool);
  const uow = new PgUnitOfWork(db, { ...timeouts, retryMax: 3, backoffBaseMs: 1, ...options });
  const count = async () =>
    Number((await tdb.owner<{ n: string }[]>`select count(*) as n from probe`)[0]?.n);
  return { tdb, pool, db, uow, count };
}

void t.test(
  'a nested run joins the same transaction and an error rolls everything back',
  async (t) => {
    const { db, uow, count } = await setup(t);
    const ids: string[] = [];
    await t.rejects(
      uow.run(async () => {
        ids.push((await db.sql()`select txid_current()::text as x`)[0]?.['x'] as string);
        await db.sql()`insert into probe values (1, 'outer')`;
        await uow.run(async () => {
          ids.push((await db.sql()`select txid_current()::text as x`)[0]?.['x'] as string);
          await db.sql()`insert into probe values (2, 'inner')`;
        });
        throw new Error('boom');
      }),
      /boom/,
    );
    t.equal(ids.length, 2);
    t.equal(ids[0], ids[1], 'the nested run saw the outer transaction');
    t.equal(await count(), 0, 'nothing was committed');
  },
);

void t.test('a nested run with a savepoint rolls back only its own work', async (t) => {
  const { db, uow, count } = await setup(t);
  await uow.run(async () => {
    await db.sql()`insert into probe values (1, 'kept')`;
    await t.rejects(
      uow.run(
        async () => {
          await db.sql()`insert into probe values (2, 'dropped')`;
          throw new Error('inner');
        },
        { nested: true },
      ),
      /inner/,
    );
  });
  t.equal(await count(), 1);
});

void t.test('transactions run at READ COMMITTED with the configured timeouts', async (t) => {
  const { db, uow } = await setup(t, {
    lockTimeoutMs: 1234,
    statementTimeoutMs: 4567,
    transactionTimeoutMs: 8910,
  });
  const row = await uow.run(async () => {
    const [r] = await db.sql()<{ iso: string; lt: string; st: string; tt: string }[]>`
      select current_setting('transaction_isolation') as iso, current_setting('lock_timeout') as lt,
             current_setting('statement_timeout') as st, current_setting('transaction_timeout') as tt`;
    return r;
  });
  t.same(row, { iso: 'read committed', lt: '1234ms', st: '4567ms', tt: '8910ms' });
});

void t.test(
  'a fault-injected deadlock on attempt 1 runs the function again and commits once',
  async (t) => {
    let calls = 0;
    const retries: string[] = [];
    const { db, uow, count } = await setup(t, {
      faultHook: ({ attempt }) => (attempt === 1 ? '40P01' : undefined),
      onRetry: ({ code }) => retries.push(code),
    });
    const attempts: number[] = [];
    await uow.run(async () => {
      calls++;
      attempts.push(db.attempt());
      await db.sql()`insert into probe values (1, 'once')`;
    });
    t.equal(calls, 2, 'the function ran twice');
    t.same(attempts, [1, 2]);
    t.same(retries, ['40P01']);
    t.equal(await count(), 1, 'exactly one effect');
  },
);

void t.test('when retries are exhausted the error surfaces', async (t) => {
  let calls = 0;
  const { db, uow, count } = await setup(t, { retryMax: 2, faultHook: () => '40001' });
  await t.rejects(
    uow.run(async () => {
      calls++;
      await db.sql()`insert into probe values (1, 'never')`;
    }),
    { code: '40001' },
  );
  t.equal(calls, 3, 'one run and two retries');
  t.equal(await count(), 0);
});

void t.test('an error marked non-retryable is not retried', async (t) => {
  let calls = 0;
  const { uow } = await setup(t);
  await t.rejects(
    uow.run(() => {
      calls++;
      return Promise.reject(markNonRetryable(Object.assign(new Error('held'), { code: '55P03' })));
    }),
    /held/,
  );
  t.equal(calls, 1);
});

void t.test(
  '55P03 really happens with a short lock timeout against a second open transaction',
  async (t) => {
    const { tdb, db, uow } = await setup(t, { lockTimeoutMs: 100, retryMax: 0 });
    await tdb.owner`insert into probe values (1, 'locked')`;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holder = tdb.owner.begin(async (tx) => {
      await tx`update probe set v = 'holder' where id = 1`;
      locked();
      await held;
    });
    await isLocked;
    await t.rejects(
      uow.run(async () => {
        await db.sql()`update probe set v = 'waiter' where id = 1`;
      }),
      { code: '55P03' },
    );
    release();
    await holder;
  },
);

void t.test(
  'adapters can demand the transaction, and the pool is refused inside one',
  async (t) => {
    const { db, uow } = await setup(t);
    t.throws(() => db.tx('taking a key'), TransactionRequiredError);
    t.equal(db.attempt(), 0);
    t.ok(db.poolOutsideTransaction('replay read'), 'the pool is fine outside');
    await uow.run(async () => {
      t.ok(uow.inTransaction());
      t.ok(db.tx('taking a key'));
      t.throws(() => db.poolOutsideTransaction('replay read'), PoolInsideTransactionError);
      await db.sql()`select 1`;
    });
    t.notOk(uow.inTransaction());
  },
);

void t.test(
  "when the connection dies under fn, run rejects at once and fn's later queries fail cleanly",
  async (t) => {
    const { tdb, db, uow } = await setup(t);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let later: unknown;
    let fnDone!: () => void;
    const fnFinished = new Promise<void>((r) => (fnDone = r));
    const running = uow.run(async () => {
      await db.sql()`insert into probe values (1, 'doomed')`;
      await gate;
      try {
        await db.sql()`insert into probe values (2, 'after')`;
      } catch (err) {
        later = err;
      } finally {
        fnDone();
      }
    });
    const settled = running.then(
      () => 'resolved',
      (err: unknown) => err,
    );
    // Wait until the transaction's insert is in, then kill its backend.
    for (;;) {
      const rows =
        await tdb.owner`select 1 from pg_locks l join pg_class c on c.oid = l.relation where c.relname = 'probe' and l.mode = 'RowExclusiveLock'`;
      if (rows.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    // As superuser: other roles' transaction details are hidden from the owner.
    const admin = createSql(tdb.adminUrl, { max: 1, applicationName: 'uow-test-admin' });
    const killed =
      await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and xact_start is not null and pid <> pg_backend_pid() and usename = ${tdb.state.app.name}`;
    await admin.end();
    t.equal(killed.length, 1, 'the transaction backend was terminated');
    const outcome = await settled;
    t.not(outcome, 'resolved', 'run rejected while fn still waited');
    release();
    await fnFinished;
    t.type(later, TransactionEndedError, "fn's next query fails at once, not on the dead socket");
    const [row] = await tdb.owner<{ n: string }[]>`select count(*) as n from probe`;
    t.equal(Number(row?.n), 0, 'nothing committed');
  },
);

void t.test(
  'a statement sent with the commit commits with the transaction when it succeeds',
  async (t) => {
    const { db, uow, count } = await setup(t);
    const value = await uow.run(async () => {
      await db.sql()`insert into probe values (1, 'body')`;
      db.sendWithCommit('the test tail', (tx) => tx`insert into probe values (2, 'tail')`);
      return 'done';
    });
    t.equal(value, 'done');
    t.equal(await count(), 2, 'both rows committed');
  },
);

void t.test(
  'a failing statement sent with the commit turns the COMMIT into a rollback and the run rejects',
  async (t) => {
    const { db, uow, count } = await setup(t);
    let calls = 0;
    await t.rejects(
      uow.run(async () => {
        calls++;
        await db.sql()`insert into probe values (1, 'body')`;
        // A unique violation, found by PostgreSQL only after fn has returned.
        db.sendWithCommit('the test tail', (tx) => tx`insert into probe values (1, 'clash')`);
        return 'done';
      }),
      { code: '23505' },
    );
    t.equal(calls, 1, 'not retried: 23505 is not retryable');
    t.equal(await count(), 0, 'nothing committed, not even the body of the transaction');
  },
);

void t.test(
  'a retryable failure of a statement sent with the commit retries the run',
  async (t) => {
    const { tdb, db, uow, count } = await setup(t);
    // A sequence is not transactional: it counts calls across rolled-back attempts.
    await tdb.owner`create sequence tail_calls`;
    await tdb.owner`
    create function tail_fails_once() returns int language plpgsql as $$
    begin
      if nextval('tail_calls') = 1 then
        raise exception 'injected serialization failure' using errcode = '40001';
      end if;
      return 1;
    end $$`;
    await tdb.owner.unsafe(`grant usage on sequence tail_calls to ${tdb.state.app.name}`);
    const attempts: number[] = [];
    await uow.run(async () => {
      attempts.push(db.attempt());
      await db.sql()`insert into probe values (1, 'once')`;
      db.sendWithCommit('the test tail', (tx) => tx`select tail_fails_once()`);
    });
    t.same(attempts, [1, 2], 'the whole function ran again');
    t.equal(await count(), 1, 'exactly one effect');
  },
);

void t.test(
  'a function that throws after sending a statement with the commit rejects with its own error',
  async (t) => {
    const { db, uow, count } = await setup(t);
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown): void => {
      unhandled.push(err);
    };
    process.on('unhandledRejection', onUnhandled);
    t.teardown(() => process.off('unhandledRejection', onUnhandled));
    await t.rejects(
      uow.run(async () => {
        db.sendWithCommit('the test tail', (tx) => tx`insert into probe values (1, 'tail')`);
        await db.sql()`select 1`;
        throw new Error('after the tail');
      }),
      /after the tail/,
    );
    await new Promise((r) => setTimeout(r, 50));
    t.same(unhandled, [], 'no unhandled rejection');
    t.equal(await count(), 0);
  },
);

void t.test(
  'a statement sent with the commit from a savepoint is refused: its savepoint could hide its failure',
  async (t) => {
    const { db, uow, count } = await setup(t);
    await uow.run(async () => {
      await db.sql()`insert into probe values (1, 'outer')`;
      await t.rejects(
        uow.run(
          async () => {
            db.sendWithCommit('the test tail', (tx) => tx`insert into probe values (2, 'tail')`);
            return Promise.resolve();
          },
          { nested: true },
        ),
        /outermost unit of work/,
      );
    });
    t.equal(await count(), 1, 'only the outer row');
  },
);

void t.test(
  'a statement started after its unit of work ended is refused, never run in a later transaction',
  async (t) => {
    const { db, uow, count } = await setup(t);
    let late: Promise<unknown> | undefined;
    await uow.run(async () => {
      await db.sql()`insert into probe values (1, 'in time')`;
      // A detached task: it keeps the unit of work's context past the commit.
      late = new Promise((r) => setTimeout(r, 100)).then(
        () => db.sql()`insert into probe values (2, 'late')`,
      );
    });
    await t.rejects(late!, TransactionEndedError);
    t.equal(await count(), 1);
  },
);

void t.test('sending a statement with the commit outside a unit of work is refused', (t) => {
  const db = new PgDatabase(
    createSql('postgres://u:p@127.0.0.1:1/none', { max: 1, applicationName: 'x' }),
  );
  t.throws(() => {
    db.sendWithCommit('the test tail', (tx) => tx`select 1`);
  }, TransactionRequiredError);
  t.end();
});

void t.test('a result with more rows than its count is refused, never read', (t) => {
  const sparse = Object.assign([undefined, { id: 1 }], { count: 1, command: 'SELECT' });
  t.throws(() => checkedResult(sparse), IncompleteResultError);
  t.throws(() => checkedResult(sparse), { code: 'RESULT_INCOMPLETE' });
  const whole = Object.assign([{ id: 1 }], { count: 1, command: 'SELECT' });
  t.equal(checkedResult(whole), whole);
  // An UPDATE without RETURNING counts rows it hands back none of.
  const updated = Object.assign([], { count: 3, command: 'UPDATE' });
  t.equal(checkedResult(updated), updated);
  t.equal(checkedResult('not a result'), 'not a result');
  t.end();
});

void t.test('reads through the pool and through a transaction check their results', async (t) => {
  // A pool whose driver hands back a result with a hole, as postgres.js
  // 3.4.9 does after a connection was cut mid-result.
  const sparse = () =>
    Promise.resolve(Object.assign([undefined, { id: 1 }], { count: 1, command: 'SELECT' }));
  const pool = Object.assign(
    (strings: TemplateStringsArray) => {
      t.ok(Array.isArray(strings));
      return {
        then: (ok: (v: unknown) => unknown, no: (e: unknown) => unknown) => sparse().then(ok, no),
      };
    },
    {
      unsafe: () => ({
        then: (ok: (v: unknown) => unknown, no: (e: unknown) => unknown) => sparse().then(ok, no),
      }),
    },
  );
  const db = new PgDatabase(pool as unknown as Sql);
  await t.rejects(Promise.resolve(db.sql()`select 1`), IncompleteResultError);
  await t.rejects(
    Promise.resolve(db.poolOutsideTransaction('a test read').unsafe('select 1')),
    IncompleteResultError,
  );
  const { db: real, uow } = await setup(t);
  const rows = await uow.run(() => Promise.resolve(real.sql()`select 1 as one`));
  t.same([...rows], [{ one: 1 }], 'a whole result passes');
});

void t.test('reconnecting backs off briefly: at most a second between attempts', (t) => {
  for (let attempt = 0; attempt < 20; attempt++) {
    const delay = reconnectBackoff(attempt);
    t.ok(delay > 0 && delay <= 1, `attempt ${String(attempt)}: ${String(delay)} s`);
  }
  t.ok(reconnectBackoff(0) <= 0.05, 'the first retry comes at once');
  t.end();
});

void t.test(
  'a COMMIT is not cut by the transaction timeouts: work PostgreSQL does at commit (a synchronous standby, deferred triggers) finishes',
  async (t) => {
    // A deferred constraint trigger runs inside the COMMIT statement, as the
    // wait for a synchronous standby does. Cancelling that wait would leave
    // the transaction committed on the primary alone while the client is
    // told it committed (or, with transaction_timeout, a FATAL after the
    // local commit); both must run to the end instead.
    const { tdb, db, uow, count } = await setup(t, {
      statementTimeoutMs: 300,
      transactionTimeoutMs: 600,
    });
    await tdb.owner.unsafe(`
      create function probe_slow_commit() returns trigger language plpgsql as $$
      begin perform pg_sleep(0.9); return null; end $$;
      create constraint trigger probe_slow_commit after insert on probe
        deferrable initially deferred for each row execute function probe_slow_commit();`);
    await uow.run(async () => {
      await db.sql()`insert into probe values (1, 'slow commit')`;
    });
    t.equal(await count(), 1, 'committed, past both the statement and the transaction timeout');
    await t.rejects(
      uow.run(async () => {
        await db.sql()`select pg_sleep(0.5)`;
      }),
      { code: '57014' },
      'a statement before the COMMIT is still bounded',
    );
  },
);

/**
 * A pool of one connection through a forwarder that counts what the client
 * writes, and a unit of work over it; the statements are prepared by a
 * first run, so a counted run sends each one in a single message.
 */
async function counted(t: Test) {
  const { tdb } = await setup(t);
  const url = new URL(tdb.appUrl);
  const forwarder = await startForwarder(Number(url.port));
  t.teardown(() => forwarder.close());
  url.port = String(forwarder.port);
  const pool = createSql(url.toString(), { max: 1, applicationName: 'uow-count' });
  t.teardown(() => pool.end({ timeout: 1 }));
  const db = new PgDatabase(pool);
  const uow = new PgUnitOfWork(db, { ...timeouts, retryMax: 0 });
  const writes = async (fn: () => Promise<unknown>): Promise<number> => {
    await fn();
    const before = forwarder.clientChunks();
    await fn();
    return forwarder.clientChunks() - before;
  };
  return { tdb, db, uow, writes };
}

void t.test(
  'BEGIN and the settings travel with the first statement: one statement, two writes',
  async (t) => {
    const { db, uow, writes } = await counted(t);
    let id = 0;
    const n = await writes(() =>
      uow.run(async () => {
        id += 1;
        await db.sql()`insert into probe values (${id}, 'one')`;
      }),
    );
    t.equal(n, 2, 'BEGIN, settings and the insert; then COMMIT');
  },
);

void t.test(
  "a pool whose sessions start with the unit of work's timeouts is sent no settings per transaction, and its transactions run with them",
  async (t) => {
    const { tdb } = await setup(t);
    const own = { lockTimeoutMs: 1234, statementTimeoutMs: 4567, transactionTimeoutMs: 8910 };
    // The URL's parameters win over the startup options (postgres.js), as a
    // pooler that drops startup parameters would: confirmed, never assumed.
    for (const [preset, query] of [
      [true, ''],
      [false, ''],
      [false, '?lock_timeout=0&statement_timeout=0&transaction_timeout=0'],
    ] as const) {
      let sent = Buffer.alloc(0);
      const url = new URL(tdb.appUrl);
      const forwarder = await startForwarder(Number(url.port), {
        onClientData: (chunk) => {
          sent = Buffer.concat([sent, chunk]);
        },
      });
      t.teardown(() => forwarder.close());
      url.port = String(forwarder.port);
      const pool = createSql(`${url.toString()}${query}`, {
        max: 1,
        applicationName: 'uow-preset',
        ...(preset || query !== '' ? { session: own } : {}),
      });
      t.teardown(() => pool.end({ timeout: 1 }));
      const db = new PgDatabase(pool);
      t.equal(await db.confirmSessionTimeouts(), preset, `confirmed ${String(preset)}${query}`);
      const uow = new PgUnitOfWork(db, { ...own, retryMax: 0 });
      const read = () =>
        uow.run(async () => {
          const [r] = await db.sql()<{ lt: string; st: string; tt: string }[]>`
            select current_setting('lock_timeout') as lt,
                   current_setting('statement_timeout') as st,
                   current_setting('transaction_timeout') as tt`;
          return r;
        });
      await read();
      sent = Buffer.alloc(0);
      t.same(
        await read(),
        { lt: '1234ms', st: '4567ms', tt: '8910ms' },
        `preset ${String(preset)}`,
      );
      t.equal(
        sent.includes('1234ms'),
        !preset,
        preset ? 'the session has them: not sent' : 'sent with BEGIN',
      );
    }
  },
);

void t.test('a savepoint travels with the statements after it', async (t) => {
  const { db, uow, writes } = await counted(t);
  let id = 0;
  const n = await writes(() =>
    uow.run(async () => {
      id += 2;
      await db.sql()`insert into probe values (${id}, 'outer')`;
      await uow.run(
        async () => {
          await db.sql()`insert into probe values (${id + 1}, 'inner')`;
        },
        { nested: true },
      );
    }),
  );
  t.equal(n, 3, 'BEGIN with the first insert; SAVEPOINT with the second; COMMIT');
});

void t.test('a failed statement the function caught still fails its transaction', async (t) => {
  const { db, uow, count } = await setup(t, { retryMax: 0 });
  await t.rejects(
    uow.run(async () => {
      await db.sql()`insert into probe values (1, 'kept?')`;
      await db.sql()`insert into probe values (1, 'clash')`.catch(() => undefined);
      return 'swallowed';
    }),
    { code: '23505' },
    'the caught failure, not a success',
  );
  t.equal(await count(), 0, 'nothing committed');
});

void t.test(
  'a failed statement caught inside a savepoint rolls the savepoint back and the outer work commits',
  async (t) => {
    const { db, uow, count } = await setup(t, { retryMax: 0 });
    await uow.run(async () => {
      await db.sql()`insert into probe values (1, 'outer')`;
      await t.rejects(
        uow.run(
          async () => {
            await db.sql()`insert into probe values (2, 'inner')`;
            await db.sql()`insert into probe values (2, 'clash')`.catch(() => undefined);
          },
          { nested: true },
        ),
        { code: '23505' },
      );
      await db.sql()`insert into probe values (3, 'after')`;
    });
    t.equal(await count(), 2, 'the outer rows, not the savepoint one');
  },
);

void t.test(
  'a COMMIT that PostgreSQL answers with a rollback rejects, though no awaited statement failed',
  async (t) => {
    const { db, uow, count } = await setup(t, { retryMax: 0 });
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown): void => {
      unhandled.push(err);
    };
    process.on('unhandledRejection', onUnhandled);
    t.teardown(() => process.off('unhandledRejection', onUnhandled));
    await t.rejects(
      uow.run(async () => {
        await db.sql()`insert into probe values (1, 'body')`;
        // Sent and never awaited: its failure aborts the transaction unseen.
        void db.sql()`select 1 / 0`.execute();
        await new Promise((r) => setTimeout(r, 50));
      }),
      TransactionAbortedError,
    );
    t.equal(await count(), 0);
    // The listener is there for the statement left unawaited on purpose:
    // its own rejection is the only one allowed.
    await new Promise((r) => setTimeout(r, 50));
    t.ok(
      unhandled.every((err) => (err as { code?: unknown }).code === '22012'),
      'no unhandled rejection but the division by zero left unawaited',
    );
  },
);

void t.test(
  'a statement a detached task starts once the COMMIT is sent is refused, not run after it',
  async (t) => {
    const { db, uow, count } = await setup(t);
    let late: Promise<unknown> | undefined;
    await uow.run(async () => {
      await db.sql()`insert into probe values (1, 'in time')`;
      // Runs after the function returned, before the COMMIT is answered.
      setImmediate(() => {
        late = (async () => db.sql()`insert into probe values (2, 'late')`)().then(
          () => 'ran',
          (err: unknown) => err,
        );
      });
    });
    await new Promise((r) => setImmediate(r));
    t.type(await late, TransactionEndedError);
    t.equal(await count(), 1);
  },
);

void t.test("a transaction's client cannot begin, reserve or end the connection", async (t) => {
  const { db, uow } = await setup(t);
  await uow.run(async () => {
    const tx = db.tx('probing') as unknown as Record<string, () => unknown>;
    for (const method of ['begin', 'reserve', 'release', 'end', 'listen', 'savepoint']) {
      t.throws(() => tx[method]!(), /not available on a unit of work's transaction/, method);
    }
    await db.sql()`select 1`;
  });
});

void t.test(
  'after a connection lost under fn, the pool of one serves the next unit of work',
  async (t) => {
    const { tdb } = await setup(t);
    const pool = createSql(tdb.appUrl, { max: 1, applicationName: 'uow-lost' });
    t.teardown(() => pool.end({ timeout: 1 }));
    const db = new PgDatabase(pool);
    const uow = new PgUnitOfWork(db, { ...timeouts, retryMax: 0 });
    const admin = createSql(tdb.adminUrl, { max: 1, applicationName: 'uow-test-admin' });
    t.teardown(() => admin.end({ timeout: 1 }));
    await t.rejects(
      uow.run(async () => {
        const [me] = await db.sql()<{ pid: number }[]>`select pg_backend_pid() as pid`;
        await admin`select pg_terminate_backend(${me!.pid})`;
        await new Promise((r) => setTimeout(r, 100));
        await db.sql()`insert into probe values (1, 'after the loss')`;
      }),
    );
    await uow.run(async () => {
      await db.sql()`insert into probe values (2, 'next')`;
    });
    const rows = await tdb.owner<{ id: number }[]>`select id from probe order by id`;
    t.same(
      rows.map((r) => r.id),
      [2],
      'only the next unit of work committed',
    );
  },
);

void t.test(
  "a run's own onRetry hears each retry's error and attempt, from a statement and from the commit",
  async (t) => {
    const { tdb, db, uow, count } = await setup(t);
    await tdb.owner`create sequence retry_calls`;
    // The first call fails in a statement of fn, the second in a statement
    // sent with the COMMIT; a sequence counts across rolled-back attempts.
    await tdb.owner`
    create function fails_twice() returns int language plpgsql as $$
    declare n bigint := nextval('retry_calls');
    begin
      if n = 1 then raise exception 'injected deadlock' using errcode = '40P01'; end if;
      if n = 2 then raise exception 'injected serialization failure' using errcode = '40001'; end if;
      return 1;
    end $$`;
    await tdb.owner.unsafe(`grant usage on sequence retry_calls to ${tdb.state.app.name}`);
    const heard: [string, number][] = [];
    const attempts: number[] = [];
    await uow.run(
      async () => {
        const attempt = db.attempt();
        attempts.push(attempt);
        await db.sql()`insert into probe values (1, 'once')`;
        if (attempt === 1) await db.sql()`select fails_twice()`;
        else db.sendWithCommit('the test tail', (tx) => tx`select fails_twice()`);
      },
      {
        onRetry: (err, attempt) => {
          heard.push([(err as { code: string }).code, attempt]);
        },
      },
    );
    t.same(attempts, [1, 2, 3]);
    t.same(heard, [
      ['40P01', 1],
      ['40001', 2],
    ]);
    t.equal(await count(), 1, 'exactly one effect');
  },
);
