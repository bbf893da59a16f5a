import t from 'tap';
import { ManualClock } from '../clock/index.js';
import { BoundedCache } from './index.js';

/** A cache on a manual clock, with every drop recorded, holding `filled` (values 1, 2, ...). */
function cacheOn(ttlMs: number, maxEntries: number, filled: string[] = []) {
  const clock = new ManualClock('2026-01-01T00:00:00Z');
  const dropped: string[] = [];
  const cache = new BoundedCache<string, number>({
    ttlMs,
    maxEntries,
    now: () => clock.now().getTime(),
    onDrop: (key) => dropped.push(key),
  });
  filled.forEach((key, i) => {
    cache.set(key, i + 1);
  });
  return { clock, cache, dropped };
}

void t.test('bad options are refused', (t) => {
  const bad: [number, number][] = [
    [-1, 1],
    [Number.NaN, 1],
    [1, 0],
    [1, 1.5],
  ];
  for (const [ttlMs, maxEntries] of bad) {
    t.throws(
      () => new BoundedCache({ ttlMs, maxEntries }),
      RangeError,
      `${String(ttlMs)}, ${String(maxEntries)}`,
    );
  }
  t.end();
});

void t.test('the least recently used entry goes first', (t) => {
  const { cache, dropped } = cacheOn(60_000, 3, ['a', 'b', 'c']);
  t.equal(cache.get('a'), 1, 'a is used, so b is now the oldest');
  cache.set('d', 4);
  t.same(dropped, ['b']);
  t.equal(cache.get('b'), undefined);
  cache.set('e', 5);
  t.same(dropped, ['b', 'c'], 'then c, never the used a');
  t.same([cache.get('a'), cache.get('d'), cache.get('e')], [1, 4, 5]);
  t.equal(cache.size, 3, 'never more than maxEntries');
  t.end();
});

void t.test('a set of a held key replaces it without evicting another', (t) => {
  const { cache, dropped } = cacheOn(60_000, 2, ['a', 'b']);
  cache.set('a', 10);
  t.same(dropped, ['a'], 'only the replaced value is told');
  t.same([cache.get('a'), cache.get('b')], [10, 2]);
  t.end();
});

void t.test('an entry is served for less than the TTL from its read', (t) => {
  const { clock, cache, dropped } = cacheOn(1_000, 10, ['a']);
  clock.advance(999);
  t.equal(cache.get('a'), 1);
  clock.advance(1);
  t.equal(cache.get('a'), undefined, 'at the TTL it is stale');
  t.same(dropped, ['a']);
  t.equal(cache.size, 0, 'and dropped');

  const readAt = clock.now().getTime();
  clock.advance(600);
  cache.set('b', 2, Infinity, readAt);
  clock.advance(400);
  t.equal(cache.get('b'), undefined, 'counted from the read given, not the set');
  t.end();
});

void t.test('an entry is never served at or past its own expiry', (t) => {
  const { cache } = cacheOn(60_000, 10);
  cache.set('a', 1, 5_000);
  t.equal(cache.get('a', 4_999), 1);
  t.equal(cache.get('a'), 1, 'no time given: only the TTL counts');
  t.equal(cache.get('a', 5_000), undefined);
  t.equal(cache.size, 0);
  t.end();
});

void t.test('a TTL of 0 keeps nothing; delete and clear tell no one', (t) => {
  t.equal(cacheOn(0, 10, ['a']).cache.size, 0);

  const { clock, cache, dropped } = cacheOn(60_000, 10, ['a', 'b']);
  t.equal(cache.delete('a'), true);
  t.equal(cache.delete('a'), false);
  cache.clear();
  t.equal(cache.size, 0);
  t.same(dropped, []);
  t.equal(cache.ttlMs, 60_000);
  t.equal(cache.now(), clock.now().getTime());
  t.end();
});
