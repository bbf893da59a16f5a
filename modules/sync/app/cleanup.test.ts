/**
 * The cleanup use case's pacing, with a fake storage and a fake timer: a run
 * alone goes at full speed, a batch slowed by other work is followed by a
 * pause in proportion, pauses are capped and cancellable. The deletes
 * themselves are tested against PostgreSQL in test/sync-cleanup.test.ts.
 */
import t from 'tap';
import { ManualClock } from '../../../kernel/clock/index.js';
import {
  MAX_CLEANUP_PAUSE_MS,
  runCleanup,
  type CleanupTimer,
  type ExpiredKeys,
} from './cleanup.js';

/** Storage whose batches take the given times on a fake monotonic clock. */
function fake(durations: readonly number[], batchSize: number, rows: number) {
  let now = 0;
  let left = rows;
  let call = 0;
  const pauses: number[] = [];
  const keys: ExpiredKeys = {
    deleteBatch: (_now, limit) => {
      now += durations[Math.min(call, durations.length - 1)] ?? 0;
      call++;
      const n = Math.min(limit, left);
      left -= n;
      return Promise.resolve(n);
    },
  };
  const timer: CleanupTimer = {
    now: () => now,
    sleep: (ms) => {
      pauses.push(ms);
      now += ms;
      return Promise.resolve();
    },
  };
  return { keys, timer, pauses, batchSize };
}

void t.test('alone, batches keep their speed and the run never pauses', async (t) => {
  const f = fake([4, 4, 4, 4], 10, 35);
  const report = await runCleanup({
    keys: f.keys,
    clock: new ManualClock('2026-06-01T00:00:00Z'),
    batchSize: 10,
    pacing: 2,
    timer: f.timer,
  });
  t.same(report, { deleted: 35, batches: 4, aborted: false });
  t.same(f.pauses, [], 'no pause');
});

void t.test(
  'a batch slower than the fastest one is followed by pacing times the difference',
  async (t) => {
    // 5 ms alone, then slowed to 8, 15 and 5 ms again by other work.
    const f = fake([5, 8, 15, 5, 9, 5], 10, 55);
    await runCleanup({
      keys: f.keys,
      clock: new ManualClock('2026-06-01T00:00:00Z'),
      batchSize: 10,
      pacing: 2,
      timer: f.timer,
    });
    t.same(f.pauses, [6, 20, 8], 'pauses of 2 x (8-5), 2 x (15-5), 2 x (9-5)');
  },
);

void t.test('the first batch sets the pace only until a faster one is seen', async (t) => {
  // A cold first batch (20 ms) must not excuse the slow ones after it.
  const f = fake([20, 4, 10, 4], 10, 35);
  await runCleanup({
    keys: f.keys,
    clock: new ManualClock('2026-06-01T00:00:00Z'),
    batchSize: 10,
    pacing: 1,
    timer: f.timer,
  });
  t.same(f.pauses, [6], 'only after the third batch: 1 x (10-4)');
});

void t.test('pacing 0 never pauses; a pause is capped', async (t) => {
  const off = fake([1, 500, 1], 10, 25);
  await runCleanup({
    keys: off.keys,
    clock: new ManualClock('2026-06-01T00:00:00Z'),
    batchSize: 10,
    pacing: 0,
    timer: off.timer,
  });
  t.same(off.pauses, []);
  const capped = fake([1, 5000, 1], 10, 25);
  await runCleanup({
    keys: capped.keys,
    clock: new ManualClock('2026-06-01T00:00:00Z'),
    batchSize: 10,
    pacing: 10,
    timer: capped.timer,
  });
  t.same(capped.pauses, [MAX_CLEANUP_PAUSE_MS]);
});

void t.test('no pause follows the last, short batch', async (t) => {
  const f = fake([2, 9], 10, 15);
  await runCleanup({
    keys: f.keys,
    clock: new ManualClock('2026-06-01T00:00:00Z'),
    batchSize: 10,
    pacing: 3,
    timer: f.timer,
  });
  t.same(f.pauses, [], 'the run ended with the short batch');
});

void t.test('a cancel during a pause ends the run before the next batch', async (t) => {
  const controller = new AbortController();
  const f = fake([1, 5, 5], 10, 100);
  const report = await runCleanup({
    keys: f.keys,
    clock: new ManualClock('2026-06-01T00:00:00Z'),
    batchSize: 10,
    pacing: 1,
    signal: controller.signal,
    timer: {
      now: () => f.timer.now(),
      sleep: (ms, signal) => {
        t.equal(ms, 4);
        t.equal(signal, controller.signal, 'the pause listens to the run signal');
        controller.abort();
        return Promise.reject(Object.assign(new Error('aborted'), { name: 'AbortError' }));
      },
    },
  });
  t.same(report, { deleted: 20, batches: 2, aborted: true });
});
