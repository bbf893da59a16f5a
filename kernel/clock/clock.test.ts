import t from 'tap';
import { ManualClock, systemClock } from './index.js';
import type { Clock } from './index.js';

void t.test('systemClock tells the current time', (t) => {
  const before = Date.now();
  const now = systemClock.now();
  const after = Date.now();
  t.ok(now instanceof Date);
  t.ok(now.getTime() >= before && now.getTime() <= after);
  t.not(systemClock.now(), now, 'a fresh Date each call');
  t.ok(Object.isFrozen(systemClock), 'cannot be replaced piecemeal');
  t.end();
});

void t.test('ManualClock starts at the given Date or ISO string', (t) => {
  const start = new Date('2025-05-06T07:08:09.010Z');
  const fromDate = new ManualClock(start);
  t.equal(fromDate.now().toISOString(), '2025-05-06T07:08:09.010Z');
  start.setTime(0);
  t.equal(
    fromDate.now().toISOString(),
    '2025-05-06T07:08:09.010Z',
    'mutating the start Date has no effect',
  );

  const fromString = new ManualClock('2025-05-06T07:08:09.010Z');
  t.equal(fromString.now().getTime(), Date.parse('2025-05-06T07:08:09.010Z'));
  t.end();
});

void t.test('ManualClock.now returns a fresh copy each time', (t) => {
  const clock = new ManualClock('2030-01-01T00:00:00.000Z');
  const a = clock.now();
  a.setTime(0);
  const b = clock.now();
  t.equal(b.toISOString(), '2030-01-01T00:00:00.000Z', 'mutating a result leaves the clock alone');
  t.not(clock.now(), b);
  t.end();
});

void t.test('ManualClock.advance moves time forward', (t) => {
  const clock = new ManualClock('2030-01-01T00:00:00.000Z');
  clock.advance(1500);
  t.equal(clock.now().toISOString(), '2030-01-01T00:00:01.500Z');
  clock.advance(0);
  t.equal(clock.now().toISOString(), '2030-01-01T00:00:01.500Z');
  clock.advance(24 * 60 * 60 * 1000);
  t.equal(clock.now().toISOString(), '2030-01-02T00:00:01.500Z');
  t.end();
});

void t.test('ManualClock.advance refuses bad amounts', (t) => {
  const clock = new ManualClock('2030-01-01T00:00:00.000Z');
  t.throws(() => {
    clock.advance(-1);
  }, RangeError);
  t.throws(() => {
    clock.advance(Number.NaN);
  }, RangeError);
  t.throws(() => {
    clock.advance(Number.POSITIVE_INFINITY);
  }, RangeError);
  t.throws(
    () => {
      clock.advance(8.64e15);
    },
    RangeError,
    'past the last representable Date',
  );
  t.equal(clock.now().toISOString(), '2030-01-01T00:00:00.000Z', 'unchanged after refusals');
  t.end();
});

void t.test('ManualClock.set jumps to any time, backwards too', (t) => {
  const clock = new ManualClock('2030-01-01T00:00:00.000Z');
  const target = new Date('2020-02-02T02:02:02.002Z');
  clock.set(target);
  t.equal(clock.now().toISOString(), '2020-02-02T02:02:02.002Z');
  target.setTime(0);
  t.equal(clock.now().toISOString(), '2020-02-02T02:02:02.002Z', 'the argument is copied');
  clock.set('2040-04-04T04:04:04.004Z');
  t.equal(clock.now().toISOString(), '2040-04-04T04:04:04.004Z');
  t.end();
});

void t.test('ManualClock refuses invalid times', (t) => {
  t.throws(
    () => new ManualClock('not a date'),
    new TypeError('ManualClock: invalid time "not a date"'),
  );
  t.throws(() => new ManualClock(new Date(Number.NaN)), TypeError);
  const clock = new ManualClock('2030-01-01T00:00:00.000Z');
  t.throws(() => {
    clock.set('2030-13-45');
  }, TypeError);
  t.equal(clock.now().toISOString(), '2030-01-01T00:00:00.000Z', 'unchanged after refusal');
  t.end();
});

void t.test('both implement Clock', (t) => {
  const clocks: Clock[] = [systemClock, new ManualClock('2030-01-01T00:00:00.000Z')];
  for (const clock of clocks) {
    t.type(clock.now(), Date);
  }
  t.end();
});
