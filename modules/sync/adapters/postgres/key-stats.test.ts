/**
 * The key statistics read against a lost connection: it fails as a lost
 * connection, and the process goes on (postgres.js's `begin` sent its
 * ROLLBACK on the closed connection, and the driver's write threw out of a
 * timer, an uncaught exception).
 */
import t from 'tap';
import { PgDatabase } from '../../../../platform/pg/uow.js';
import { testDatabase } from '../../../../test/harness/db.js';
import { resettablePool } from '../../../../test/harness/reset-window.js';
import { PgKeyStats } from './key-stats.js';

void t.test(
  'a key statistics read whose connection is reset fails, and nothing is thrown past it',
  async (t) => {
    const tdb = await testDatabase(t);
    const { sql, reset } = resettablePool(t, tdb.appUrl);
    const stats = new PgKeyStats(new PgDatabase(sql));
    const now = new Date('2030-01-01T00:00:00.000Z');
    t.same(await stats.read(now, 5000), { rows: 0, oldestExpiredAgeSeconds: 0 }, 'an empty table');
    // Another session holds the table, so the read waits on its lock.
    const holder = await tdb.owner.reserve();
    t.teardown(() => {
      holder.release();
    });
    await holder`begin`;
    await holder`lock table idempotency_keys in access exclusive mode`;
    const read = stats.read(now, 5000).then(
      () => 'answered',
      (err: unknown) => `failed ${String((err as { code?: unknown }).code)}`,
    );
    await new Promise((r) => setTimeout(r, 200));
    await reset(() => undefined);
    t.equal(await read, 'failed ECONNRESET', 'a lost connection, which the scrape reports');
    // An uncaught exception thrown from the driver's timer would end the
    // test file here; give its immediate a turn.
    await new Promise((r) => setTimeout(r, 100));
    await holder`rollback`;
    t.same(
      await stats.read(now, 5000),
      { rows: 0, oldestExpiredAgeSeconds: 0 },
      'the pool serves again',
    );
  },
);
