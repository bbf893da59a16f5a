/**
 * The seed rule of the randomized tests: drawn afresh in every run
 * (`make check` included), printed, and a seed from the environment
 * (`SEED`, or the test's own variable) replays one run. Checked here
 * because a mistake would not show in those tests: they would still pass,
 * only on the wrong cases, or on the same ones every run.
 */
import t from 'tap';
import { describeSeed, pickSeed, randomSequence } from './seed.js';

void t.test('every run draws a fresh seed, make check included', (t) => {
  const drawn = Array.from({ length: 8 }, () => pickSeed('X_SEED', {}));
  t.ok(
    drawn.every((s) => s.source === 'drawn' && Number.isInteger(s.value)),
    'each is drawn and an integer',
  );
  t.ok(
    drawn.every((s) => s.value >= -(2 ** 31) && s.value < 2 ** 31),
    'each is a 32-bit signed integer, as fast-check replays it',
  );
  // Eight draws from 2^32 values all equal would mean the draw is not fresh.
  t.ok(new Set(drawn.map((s) => s.value)).size > 1, 'not the same seed every time');
  t.same(pickSeed('X_SEED', { X_SEED: '', SEED: ' ' }).source, 'drawn', 'empty values are unset');
  t.match(
    describeSeed(drawn[0] ?? { value: 0, source: 'drawn', variable: 'SEED' }),
    /^seed -?\d+ \(drawn for this run; replay with SEED=-?\d+\)$/,
  );
  t.end();
});

void t.test('SEED, or the test own variable, replays a run', (t) => {
  t.same(pickSeed('X_SEED', { SEED: '-17' }), {
    value: -17,
    source: 'environment',
    variable: 'SEED',
  });
  t.same(
    pickSeed('X_SEED', { SEED: '5', X_SEED: '7' }),
    { value: 7, source: 'environment', variable: 'X_SEED' },
    "the test's own variable wins",
  );
  t.equal(
    describeSeed({ value: 7, source: 'environment', variable: 'X_SEED' }),
    'seed 7 (from X_SEED; replay with SEED=7)',
  );
  for (const bad of ['abc', '1.5', '2147483648', '-2147483649', '0x']) {
    t.throws(() => pickSeed('X_SEED', { SEED: bad }), /SEED must be an integer/, bad);
    t.throws(() => pickSeed('X_SEED', { X_SEED: bad }), /X_SEED must be an integer/, bad);
  }
  t.end();
});

void t.test('a random sequence repeats for its seed and stays in [0, 1)', (t) => {
  const take = (seed: number) => {
    const next = randomSequence(seed);
    return Array.from({ length: 1000 }, () => next());
  };
  const a = take(42);
  t.same(take(42), a, 'the same seed gives the same numbers');
  t.not(take(43).join(), a.join(), 'another seed gives others');
  t.ok(
    a.every((x) => x >= 0 && x < 1),
    'every number from 0 inclusive to 1 exclusive',
  );
  t.ok(new Set(a).size > 990, 'hardly any number repeats');
  t.same(take(-1), take(2 ** 32 - 1), 'only the low 32 bits of the seed count');
  t.end();
});
