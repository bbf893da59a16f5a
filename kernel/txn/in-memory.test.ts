/**
 * `decide` over the in-memory unit of work, as the PostgreSQL one does it
 * (platform/pg/uow-decide.test.ts): keep commits, keep: false rolls back
 * and hands the value back, a failed commit is reported with the value.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { InMemoryUnitOfWork } from './in-memory.js';
import { OverlappingSavepointError } from './index.js';

/** A register whose writes are undone when their transaction rolls back. */
function register(uow: InMemoryUnitOfWork) {
  const values: string[] = [];
  return {
    values,
    write(v: string): void {
      // The transaction first, as a store takes it: a refused write is not made.
      const tx = uow.current('a write');
      values.push(v);
      tx.onRollback(() => {
        values.splice(values.indexOf(v), 1);
      });
    },
  };
}

void t.test('keep: false rolls back, hands the value back, and is not retried', async (t) => {
  const uow = new InMemoryUnitOfWork({ retryMax: 3 });
  const r = register(uow);
  let runs = 0;
  const decided = await uow.decide(() => {
    runs++;
    r.write('discarded');
    return Promise.resolve({ keep: false, value: 'the answer' });
  });
  t.same(decided, { kind: 'discarded', value: 'the answer' });
  t.equal(runs, 1);
  t.same(r.values, []);
});

void t.test('keep: true commits', async (t) => {
  const uow = new InMemoryUnitOfWork({ retryMax: 3 });
  const r = register(uow);
  const decided = await uow.decide(() => {
    r.write('kept');
    return Promise.resolve({ keep: true, value: 1 });
  });
  t.same(decided, { kind: 'kept', value: 1 });
  t.same(r.values, ['kept']);
});

void t.test('nested, keep: false undoes only the savepoint', async (t) => {
  const uow = new InMemoryUnitOfWork({ retryMax: 3 });
  const r = register(uow);
  const inner = await uow.run(async () => {
    r.write('outer');
    const decided = await uow.decide(
      () => {
        r.write('inner');
        return Promise.resolve({ keep: false, value: 'inner value' });
      },
      { nested: true },
    );
    r.write('after');
    return decided;
  });
  t.same(inner, { kind: 'discarded', value: 'inner value' });
  t.same(r.values, ['outer', 'after']);
});

void t.test('joined without nested, keep: false still undoes what it did', async (t) => {
  const uow = new InMemoryUnitOfWork({ retryMax: 3 });
  const r = register(uow);
  const inner = await uow.run(async () => {
    r.write('outer');
    const decided = await uow.decide(() => {
      r.write('inner');
      return Promise.resolve({ keep: false, value: 'inner value' });
    });
    r.write('after');
    return decided;
  });
  t.same(inner, { kind: 'discarded', value: 'inner value' });
  t.same(r.values, ['outer', 'after']);
});

void t.test('two savepoints of one scope are never open at once', async (t) => {
  const uow = new InMemoryUnitOfWork({ retryMax: 3 });
  const r = register(uow);
  const results = await uow.run(() =>
    Promise.allSettled([
      uow.decide(async () => {
        r.write('a');
        await new Promise((resolve) => setTimeout(resolve, 10));
        return { keep: true, value: 'a' };
      }),
      uow.decide(() => {
        r.write('b');
        return Promise.resolve({ keep: false, value: 'b' });
      }),
    ]),
  );
  t.same(results[0], { status: 'fulfilled', value: { kind: 'kept', value: 'a' } });
  t.type(results[1].status === 'rejected' ? results[1].reason : null, OverlappingSavepointError);
  t.same(r.values, ['a'], 'what was reported kept stays');
});

void t.test('a failing commit after keep: true is commit_failed with the value', async (t) => {
  const boom = Object.assign(new Error('commit refused'), { code: '23514' });
  const uow = new InMemoryUnitOfWork({ retryMax: 3, commitHook: () => boom });
  const r = register(uow);
  const decided = await uow.decide(() => {
    r.write('doomed');
    return Promise.resolve({ keep: true, value: 'meant to keep' });
  });
  t.same(decided, { kind: 'commit_failed', value: 'meant to keep', error: boom });
  t.same(r.values, [], 'rolled back');
});

void t.test('a retryable commit failure runs again; run() rejects a failed commit', async (t) => {
  let faults = 1;
  const retrying = new InMemoryUnitOfWork({
    retryMax: 3,
    commitHook: () =>
      faults-- > 0 ? Object.assign(new Error('serialization'), { code: '40001' }) : undefined,
  });
  let runs = 0;
  t.same(await retrying.decide(() => Promise.resolve({ keep: true, value: ++runs })), {
    kind: 'kept',
    value: 2,
  });
  const failing = new InMemoryUnitOfWork({ retryMax: 0, commitHook: () => new Error('refused') });
  await t.rejects(
    failing.run(() => Promise.resolve('x')),
    /refused/,
  );
});

void t.test("a run's own onRetry hears each retry's error and attempt", async (t) => {
  const deadlock = Object.assign(new Error('deadlock'), { code: '40P01' });
  const serialization = Object.assign(new Error('serialization'), { code: '40001' });
  const uow = new InMemoryUnitOfWork({
    retryMax: 3,
    commitHook: ({ attempt }) => (attempt === 2 ? serialization : undefined),
  });
  const heard: [unknown, number][] = [];
  let runs = 0;
  const decided = await uow.decide(
    () => {
      runs += 1;
      // The first attempt fails in fn, the second at its commit.
      if (runs === 1) return Promise.reject(deadlock);
      return Promise.resolve({ keep: true, value: runs });
    },
    {
      onRetry: (err, attempt) => {
        heard.push([err, attempt]);
      },
    },
  );
  t.same(decided, { kind: 'kept', value: 3 });
  t.same(heard, [
    [deadlock, 1],
    [serialization, 2],
  ]);
});

void t.test(
  'a savepoint that ends while one opened inside it still runs fails; the late one writes nothing',
  async (t) => {
    const uow = new InMemoryUnitOfWork({ retryMax: 3 });
    const r = register(uow);
    let grandchild: unknown;
    await t.rejects(
      uow.run(async () => {
        await uow.decide(() => {
          void uow
            .decide(async () => {
              await sleep(20);
              r.write('grandchild');
              return { keep: false, value: 'g' };
            })
            .then(
              (d) => (grandchild = d),
              (e: unknown) => (grandchild = e),
            );
          return Promise.resolve({ keep: true, value: 'child' });
        });
        r.write('parent');
      }),
      OverlappingSavepointError,
    );
    await sleep(40);
    t.match(
      grandchild,
      /the transaction is over|run is over/,
      "the late savepoint's write is refused",
    );
    t.same(r.values, []);
  },
);

void t.test(
  'a write while a savepoint of its scope runs, or after its own run, is refused',
  async (t) => {
    const uow = new InMemoryUnitOfWork({ retryMax: 3 });
    const r = register(uow);
    let during: unknown;
    let late: unknown;
    const { promise: ended, resolve: end } = Promise.withResolvers<undefined>();
    await t.rejects(
      uow.run(async () => {
        const child = uow.decide(async () => {
          await sleep(20);
          return { keep: true, value: 'c' };
        });
        try {
          r.write('during');
        } catch (err) {
          during = err;
        }
        await child;
        await uow.decide(() => {
          setTimeout(() => {
            try {
              r.write('late');
            } catch (err) {
              late = err;
            }
            end(undefined);
          }, 10);
          return Promise.resolve({ keep: false, value: 'gone' });
        });
        await ended;
        throw new Error('roll back');
      }),
      /roll back/,
    );
    t.type(during, OverlappingSavepointError);
    t.match(late, /run is over/);
    t.same(r.values, []);
  },
);

void t.test(
  'a joined decide whose fn throws at once, or resolves with no verdict, undoes its write',
  async (t) => {
    const uow = new InMemoryUnitOfWork({ retryMax: 3 });
    const r = register(uow);
    const results = await uow.run(async () => [
      await uow
        .decide(() => {
          r.write('sync');
          throw new Error('sync');
        })
        .then(
          () => 'resolved',
          (err: unknown) => (err as Error).message,
        ),
      await uow
        .decide((() => {
          r.write('bad');
          return Promise.resolve(undefined);
        }) as never)
        .then(
          () => 'resolved',
          (err: unknown) => (err as Error).name,
        ),
    ]);
    t.same(results, ['sync', 'TypeError']);
    t.same(r.values, []);
  },
);
