/**
 * The seed rule of the randomized tests: fixed in `make check`, drawn afresh
 * in a soak run, and a seed from the environment replays one run. Checked
 * here because a mistake would not show in those tests: they would still
 * pass, only on the wrong cases.
 */
import t from 'tap';
import { describeSeed, pickSeed } from './seed.js';

void t.test('outside a soak run the fixed seed is used', (t) => {
  t.same(pickSeed('X_SEED', 42, {}, false), { value: 42, source: 'fixed' });
  t.same(pickSeed('X_SEED', 42, { X_SEED: '' }, false), { value: 42, source: 'fixed' }, 'empty');
  t.equal(
    describeSeed('X_SEED', { value: 42, source: 'fixed' }),
    'seed 42 (fixed; replay with X_SEED=42)',
  );
  t.end();
});

void t.test('a soak run draws a fresh seed each time', (t) => {
  const drawn = Array.from({ length: 8 }, () => pickSeed('X_SEED', 42, {}, true));
  t.ok(
    drawn.every((s) => s.source === 'drawn' && Number.isInteger(s.value)),
    'each is drawn and an integer',
  );
  t.ok(
    drawn.every((s) => s.value >= -(2 ** 31) && s.value < 2 ** 31),
    'each is a 32-bit signed integer, as fast-check replays it',
  );
  // Eight draws from 2^32 values all equal to the fixed seed, or to one
  // another, would mean the draw is not fresh.
  t.ok(new Set(drawn.map((s) => s.value)).size > 1, 'not the same seed every time');
  t.ok(
    drawn.some((s) => s.value !== 42),
    'not the fixed seed',
  );
  t.match(
    describeSeed('X_SEED', drawn[0] ?? { value: 0, source: 'drawn' }),
    /^seed -?\d+ \(drawn for this soak run; replay with X_SEED=-?\d+\)$/,
  );
  t.end();
});

void t.test('a seed in the environment replays, soak run or not', (t) => {
  for (const isSoak of [false, true]) {
    t.same(pickSeed('X_SEED', 42, { X_SEED: '-17' }, isSoak), {
      value: -17,
      source: 'environment',
    });
  }
  t.equal(
    describeSeed('X_SEED', { value: 7, source: 'environment' }),
    'seed 7 (from X_SEED; replay with X_SEED=7)',
  );
  for (const bad of ['abc', '1.5', '2147483648', '-2147483649', '0x'])
    t.throws(
      () => pickSeed('X_SEED', 42, { X_SEED: bad }, false),
      /X_SEED must be an integer/,
      bad,
    );
  t.end();
});
