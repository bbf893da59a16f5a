import t from 'tap';
import type { Id } from '../../../kernel/ids/index.js';
import type { IdempotencyEntry } from '../../../kernel/idempotency/index.js';
import { ReplayCache } from './replay-cache.js';

const alice = '01920000-0000-7000-8000-0000000000a1' as Id;
const bob = '01920000-0000-7000-8000-0000000000b0' as Id;
const key = (n: number) => `01920000-0000-7000-8000-${String(n).padStart(12, '0')}` as Id;
const at = (ms: number) => new Date(1_800_000_000_000 + ms);
const entry = (n: number): IdempotencyEntry => ({
  sha256: Buffer.alloc(32, n),
  completed: true,
  status: 201,
  body: { id: n, nested: { list: [n] } },
  resourceId: null,
});

void t.test('options are checked', (t) => {
  t.throws(() => new ReplayCache({ ttlMs: -1, maxEntries: 1 }), RangeError);
  t.throws(() => new ReplayCache({ ttlMs: Number.NaN, maxEntries: 1 }), RangeError);
  t.throws(() => new ReplayCache({ ttlMs: 1, maxEntries: 0 }), RangeError);
  t.throws(() => new ReplayCache({ ttlMs: 1, maxEntries: 1.5 }), RangeError);
  t.end();
});

void t.test('an entry is served for its principal and key only', (t) => {
  const cache = new ReplayCache({ ttlMs: 60_000, maxEntries: 10 });
  cache.set(alice, key(1), entry(1), at(3_600_000));
  t.same(cache.get(alice, key(1), at(0)), entry(1), 'the same principal and key');
  t.equal(cache.get(bob, key(1), at(0)), undefined, 'another principal, the same key: absent');
  t.equal(cache.get(alice, key(2), at(0)), undefined, 'another key: absent');
  t.same(
    cache.get(alice, key(1).toUpperCase(), at(0)),
    entry(1),
    'the key in upper case names the same key',
  );
  t.end();
});

void t.test('an entry is never served at or past the row expiry', (t) => {
  const cache = new ReplayCache({ ttlMs: 60_000, maxEntries: 10 });
  cache.set(alice, key(1), entry(1), at(1_000));
  t.ok(cache.get(alice, key(1), at(999)), 'before the expiry');
  t.equal(cache.get(alice, key(1), at(1_000)), undefined, 'at the expiry: absent');
  t.equal(cache.size, 0, 'and dropped');
  cache.set(alice, key(2), entry(2), at(1_000));
  t.equal(cache.get(alice, key(2), at(5_000)), undefined, 'past it');
  t.end();
});

void t.test('an entry is served for at most the TTL on the monotonic clock', (t) => {
  let mono = 0;
  const cache = new ReplayCache({ ttlMs: 1_000, maxEntries: 10, now: () => mono });
  cache.set(alice, key(1), entry(1), at(3_600_000));
  mono = 999;
  t.ok(cache.get(alice, key(1), at(0)), 'inside the TTL');
  mono = 1_000;
  t.equal(cache.get(alice, key(1), at(0)), undefined, 'at the TTL: absent');
  t.equal(cache.size, 0);
  t.end();
});

void t.test('a TTL of 0 keeps nothing', (t) => {
  const cache = new ReplayCache({ ttlMs: 0, maxEntries: 10 });
  cache.set(alice, key(1), entry(1), at(3_600_000));
  t.equal(cache.size, 0);
  t.equal(cache.get(alice, key(1), at(0)), undefined);
  t.end();
});

void t.test('the least recently used entry goes first', (t) => {
  const cache = new ReplayCache({ ttlMs: 60_000, maxEntries: 2 });
  cache.set(alice, key(1), entry(1), at(3_600_000));
  cache.set(alice, key(2), entry(2), at(3_600_000));
  t.ok(cache.get(alice, key(1), at(0)), 'key 1 used, so key 2 is the oldest now');
  cache.set(alice, key(3), entry(3), at(3_600_000));
  t.equal(cache.size, 2);
  t.ok(cache.get(alice, key(1), at(0)), 'key 1 kept');
  t.equal(cache.get(alice, key(2), at(0)), undefined, 'key 2 evicted');
  t.ok(cache.get(alice, key(3), at(0)), 'key 3 kept');
  cache.set(alice, key(3), entry(4), at(3_600_000));
  t.equal(cache.size, 2, 'setting a held key replaces it');
  t.same(cache.get(alice, key(3), at(0))?.body, entry(4).body);
  t.end();
});

void t.test('only completed entries are kept, and what is served cannot be changed', (t) => {
  const cache = new ReplayCache({ ttlMs: 60_000, maxEntries: 10 });
  cache.set(alice, key(1), { ...entry(1), completed: false }, at(3_600_000));
  t.equal(cache.size, 0, 'an entry in progress is not kept');
  const kept = entry(2);
  cache.set(alice, key(2), kept, at(3_600_000));
  const served = cache.get(alice, key(2), at(0));
  t.ok(Object.isFrozen(served), 'the entry is frozen');
  t.ok(Object.isFrozen((served?.body as { nested: object }).nested), 'its body too, deeply');
  t.throws(() => {
    (served?.body as { id: number }).id = 99;
  }, TypeError);
  t.equal(
    (cache.get(alice, key(2), at(0))?.body as { id: number }).id,
    2,
    'still the stored value',
  );
  t.notOk(Object.isFrozen(kept.body), 'the entry handed in is left as it was');
  (kept.body as { id: number }).id = 7;
  t.equal(
    (cache.get(alice, key(2), at(0))?.body as { id: number }).id,
    2,
    'and is not the one kept',
  );
  t.end();
});
