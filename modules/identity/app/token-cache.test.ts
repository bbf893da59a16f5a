import t from 'tap';
import type { Id } from '../../../kernel/ids/index.js';
import type { TokenOwner } from './ports.js';
import { TokenOwnerCache } from './token-cache.js';

const alice = '01920000-0000-7000-8000-0000000000a1' as Id;
const bob = '01920000-0000-7000-8000-0000000000b0' as Id;
const hash = (n: number) => Buffer.alloc(32, n);
const owner = (principalId: Id, expiresAt: Date | null = null): TokenOwner => ({
  tokenId: `01920000-0000-7000-8000-00000000${String(principalId).slice(-4)}` as Id,
  principalId,
  principalKind: 'user',
  expiresAt,
});
const at = (ms: number) => new Date(1_800_000_000_000 + ms);

/** A loader that counts its reads and answers what `answer` holds now. */
function loader(answer: { value: TokenOwner | null }) {
  const calls = { n: 0 };
  return {
    calls,
    load: () => {
      calls.n += 1;
      return Promise.resolve(answer.value);
    },
  };
}

void t.test('options are checked', (t) => {
  t.throws(() => new TokenOwnerCache({ ttlMs: -1, maxEntries: 1 }), RangeError);
  t.throws(() => new TokenOwnerCache({ ttlMs: 1, maxEntries: 0 }), RangeError);
  t.throws(() => new TokenOwnerCache({ ttlMs: 1, maxEntries: 1.5 }), RangeError);
  t.end();
});

void t.test('nothing is served until the feed is live, nor while it is down', async (t) => {
  const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 10 });
  const l = loader({ value: owner(alice) });
  await cache.lookup(hash(1), at(0), l.load);
  await cache.lookup(hash(1), at(1), l.load);
  t.equal(l.calls.n, 2, 'before the feed is live, every lookup reads');
  t.equal(cache.size, 0);
  cache.setLive(true);
  await cache.lookup(hash(1), at(2), l.load);
  await cache.lookup(hash(1), at(3), l.load);
  t.equal(l.calls.n, 3, 'live: the second lookup is served');
  cache.setLive(false);
  t.equal(cache.size, 0, 'the feed going down drops every entry');
  await cache.lookup(hash(1), at(4), l.load);
  t.equal(l.calls.n, 4, 'down: read again');
  t.equal(cache.size, 0, 'and not kept');
  cache.setLive(true);
  await cache.lookup(hash(1), at(5), l.load);
  t.equal(l.calls.n, 5, 'back: the first lookup reads, since changes were not heard');
});

void t.test('an entry is served for the TTL and never past the token expiry', async (t) => {
  let mono = 0;
  const cache = new TokenOwnerCache({ ttlMs: 1_000, maxEntries: 10, now: () => mono });
  cache.setLive(true);
  const l = loader({ value: owner(alice) });
  await cache.lookup(hash(1), at(0), l.load);
  mono = 999;
  await cache.lookup(hash(1), at(999), l.load);
  t.equal(l.calls.n, 1, 'within the TTL');
  mono = 1_000;
  await cache.lookup(hash(1), at(1_000), l.load);
  t.equal(l.calls.n, 2, 'at the TTL it is read again');

  const expiring = loader({ value: owner(bob, at(500)) });
  await cache.lookup(hash(2), at(0), expiring.load);
  await cache.lookup(hash(2), at(499), expiring.load);
  t.equal(expiring.calls.n, 1);
  expiring.calls.n = 0;
  const { load } = loader({ value: null });
  t.equal(await cache.lookup(hash(2), at(500), load), null, 'expired: the database says no');

  const off = new TokenOwnerCache({ ttlMs: 0, maxEntries: 10 });
  off.setLive(true);
  const o = loader({ value: owner(alice) });
  await off.lookup(hash(1), at(0), o.load);
  await off.lookup(hash(1), at(0), o.load);
  t.equal(o.calls.n, 2, 'a TTL of 0 turns it off');
});

void t.test('only usable tokens are kept; a change drops the principal entries', async (t) => {
  const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 10 });
  cache.setLive(true);
  const unknown = loader({ value: null });
  await cache.lookup(hash(9), at(0), unknown.load);
  await cache.lookup(hash(9), at(1), unknown.load);
  t.equal(unknown.calls.n, 2, 'a refused token is read each time');
  const a = loader({ value: owner(alice) });
  const b = loader({ value: owner(bob) });
  await cache.lookup(hash(1), at(0), a.load);
  await cache.lookup(hash(2), at(0), a.load);
  await cache.lookup(hash(3), at(0), b.load);
  t.equal(cache.size, 3);
  cache.invalidatePrincipal(alice);
  t.equal(cache.size, 1, "both of alice's tokens are dropped, bob's is kept");
  await cache.lookup(hash(3), at(1), b.load);
  t.equal(b.calls.n, 1, 'bob is still served');
  cache.invalidatePrincipal('not-a-principal');
  t.equal(cache.size, 1, 'a payload naming nobody drops nothing');
});

void t.test(
  'a read that began before a change and ends after it is not kept (the revocation race)',
  async (t) => {
    const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 10 });
    cache.setLive(true);
    let release: (v: TokenOwner | null) => void = () => undefined;
    const slow = () =>
      new Promise<TokenOwner | null>((r) => {
        release = r;
      });
    const pending = cache.lookup(hash(1), at(0), slow);
    // The token is revoked and the notice is heard while the read is out;
    // the read saw the token before the revocation committed.
    cache.invalidatePrincipal(alice);
    release(owner(alice));
    t.same(await pending, owner(alice), 'the read itself answers what it saw');
    t.equal(cache.size, 0, 'but it is not kept');
    const again = loader({ value: null });
    t.equal(await cache.lookup(hash(1), at(1), again.load), null, 'the next lookup reads: revoked');
    t.equal(again.calls.n, 1);

    const pending2 = cache.lookup(hash(1), at(2), slow);
    cache.setLive(false);
    cache.setLive(true);
    release(owner(alice));
    await pending2;
    t.equal(cache.size, 0, 'a feed that went down and up meanwhile also keeps it out');
  },
);

void t.test('the least recently used entry goes first', async (t) => {
  const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 2 });
  cache.setLive(true);
  const l = loader({ value: owner(alice) });
  await cache.lookup(hash(1), at(0), l.load);
  await cache.lookup(hash(2), at(0), l.load);
  await cache.lookup(hash(1), at(1), l.load);
  await cache.lookup(hash(3), at(1), l.load);
  t.equal(cache.size, 2);
  t.equal(l.calls.n, 3);
  await cache.lookup(hash(1), at(2), l.load);
  t.equal(l.calls.n, 3, 'the one used last is kept');
  await cache.lookup(hash(2), at(2), l.load);
  t.equal(l.calls.n, 4, 'the one used least recently was dropped');
});

void t.test(
  'a heartbeat payload names no principal: it drops nothing and stops no store',
  async (t) => {
    const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 10 });
    cache.setLive(true);
    const a = loader({ value: owner(alice) });
    await cache.lookup(hash(1), at(0), a.load);
    let release: (v: TokenOwner | null) => void = () => undefined;
    const pending = cache.lookup(
      hash(2),
      at(0),
      () =>
        new Promise<TokenOwner | null>((r) => {
          release = r;
        }),
    );
    cache.notice('hb:0f9b6c1e-4d2a-4b8e-9a51-3c7d2e1f0a6b:42');
    release(owner(alice));
    await pending;
    t.equal(cache.size, 2, 'the entry kept and the read in flight stored');
    cache.notice(alice);
    t.equal(cache.size, 0, 'a notice naming the principal drops its entries');
  },
);

void t.test(
  'a change inside an outer transaction: the principal is not stored until its notice or one second',
  async (t) => {
    let mono = 0;
    const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 10, now: () => mono });
    cache.setLive(true);
    const a = loader({ value: owner(alice) });
    const b = loader({ value: owner(bob) });
    await cache.lookup(hash(1), at(0), a.load);
    await cache.lookup(hash(2), at(0), b.load);
    // Revoked inside an outer unit of work: not committed yet, so a read now
    // still sees the token; it must not be kept past the commit.
    cache.suppress(alice);
    t.equal(cache.size, 1, 'its entries are dropped at once');
    await cache.lookup(hash(1), at(1), a.load);
    await cache.lookup(hash(1), at(2), a.load);
    t.equal(a.calls.n, 3, 'read each time, not stored');
    await cache.lookup(hash(2), at(1), b.load);
    t.equal(b.calls.n, 1, 'another principal is still served');
    mono = 999;
    await cache.lookup(hash(1), at(3), a.load);
    t.equal(a.calls.n, 4, 'still not stored just before one second');
    mono = 1_000;
    await cache.lookup(hash(1), at(4), a.load);
    await cache.lookup(hash(1), at(5), a.load);
    t.equal(a.calls.n, 5, 'after one second it is stored again');

    cache.suppress(alice);
    await cache.lookup(hash(1), at(6), a.load);
    t.equal(a.calls.n, 6);
    cache.notice(alice);
    await cache.lookup(hash(1), at(7), a.load);
    await cache.lookup(hash(1), at(8), a.load);
    t.equal(a.calls.n, 7, 'the notice for it (the commit heard) ends the wait');
  },
);

void t.test(
  'a change of one principal does not keep another principal read from being stored',
  async (t) => {
    const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 10 });
    cache.setLive(true);
    const releases: ((v: TokenOwner | null) => void)[] = [];
    const slow = () =>
      new Promise<TokenOwner | null>((r) => {
        releases.push(r);
      });
    const forBob = cache.lookup(hash(2), at(0), slow);
    const forAlice = cache.lookup(hash(1), at(0), slow);
    cache.invalidatePrincipal(alice);
    releases[0]?.(owner(bob));
    releases[1]?.(owner(alice));
    await Promise.all([forBob, forAlice]);
    t.equal(cache.size, 1, 'only the read of the principal that changed is left out');
    const b = loader({ value: owner(bob) });
    await cache.lookup(hash(2), at(1), b.load);
    t.equal(b.calls.n, 0, 'bob is served from the cache');
  },
);

void t.test('a notice drops exactly the entries its principal still has', async (t) => {
  const cache = new TokenOwnerCache({ ttlMs: 1_000, maxEntries: 3 });
  cache.setLive(true);
  const a = loader({ value: owner(alice) });
  const b = loader({ value: owner(bob) });
  await cache.lookup(hash(1), at(0), a.load);
  await cache.lookup(hash(2), at(0), a.load);
  await cache.lookup(hash(3), at(0), b.load);
  await cache.lookup(hash(4), at(0), b.load); // evicts hash(1)
  t.equal(cache.size, 3);
  cache.invalidatePrincipal(alice);
  t.equal(cache.size, 2, 'the evicted entry is not counted twice');
  await cache.lookup(hash(2), at(1), a.load);
  t.equal(a.calls.n, 3, 'alice read again');
  cache.invalidatePrincipal(bob);
  t.equal(cache.size, 1, 'bob entries gone, alice new one kept');
  cache.invalidatePrincipal(alice);
  t.equal(cache.size, 0);
});

void t.test(
  'the TTL runs on a monotonic clock; the token expiry on the kernel clock',
  async (t) => {
    let mono = 0;
    const cache = new TokenOwnerCache({ ttlMs: 1_000, maxEntries: 10, now: () => mono });
    cache.setLive(true);
    const l = loader({ value: owner(alice, at(10_000)) });
    await cache.lookup(hash(1), at(0), l.load);
    // The kernel clock jumps back an hour: the entry is not served longer.
    mono = 1_000;
    await cache.lookup(hash(1), at(-3_600_000), l.load);
    t.equal(l.calls.n, 2, 'at the TTL on the monotonic clock it is read again');
    // The kernel clock jumps forward past the expiry: refused at once.
    mono = 1_001;
    await cache.lookup(hash(1), at(9_999), l.load);
    t.equal(l.calls.n, 2, 'served before the expiry');
    const { load } = loader({ value: null });
    t.equal(await cache.lookup(hash(1), at(10_000), load), null, 'at the expiry it is read again');
  },
);

void t.test('each lookup gets a fresh expiry Date of its own', async (t) => {
  const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 10 });
  cache.setLive(true);
  const l = loader({ value: owner(alice, at(10_000)) });
  const first = await cache.lookup(hash(1), at(0), l.load);
  first?.expiresAt?.setTime(at(99_999).getTime());
  const second = await cache.lookup(hash(1), at(1), l.load);
  t.equal(l.calls.n, 1, 'served from the cache');
  t.equal(
    second?.expiresAt?.getTime(),
    at(10_000).getTime(),
    'a caller changing its Date changes no other',
  );
  t.not(second?.expiresAt, first?.expiresAt);
});

void t.test(
  'more principals changing during a read than the cache holds: the read is not stored (a reset)',
  async (t) => {
    const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 2 });
    cache.setLive(true);
    let release: (v: TokenOwner | null) => void = () => undefined;
    const pending = cache.lookup(
      hash(1),
      at(0),
      () =>
        new Promise<TokenOwner | null>((r) => {
          release = r;
        }),
    );
    // Alice's token is revoked while her read is out, then two more
    // principals change: the per-principal counts overflow the bound and
    // are forgotten, so only a reset still knows her read is stale.
    cache.invalidatePrincipal(alice);
    cache.invalidatePrincipal(bob);
    cache.invalidatePrincipal('01920000-0000-7000-8000-0000000000c0');
    release(owner(alice));
    t.same((await pending)?.principalId, alice, 'the read answers what it read');
    t.equal(cache.size, 0, 'the stale read is not kept');
    const a = loader({ value: null });
    t.equal(await cache.lookup(hash(1), at(1), a.load), null, 'the revocation is seen');
    t.equal(a.calls.n, 1, 'from the database');
  },
);
