import t, { type Test } from 'tap';
import { ManualClock } from '../../../kernel/clock/index.js';
import { isAppError } from '../../../kernel/errs/index.js';
import { newId } from '../../../kernel/ids/index.js';
import { testDatabase } from '../../../test/harness/db.js';
import { testUnitOfWork } from '../../../test/harness/uow.js';
import { PgApiTokenRepository } from '../adapters/postgres/api-tokens.js';
import { PgPrincipalRepository } from '../adapters/postgres/principals.js';
import { IdentityService } from './identity-service.js';
import { TokenOwnerCache } from './token-cache.js';

const START = '2030-01-01T00:00:00.000Z';

async function setup(t: Test, tokenCache?: TokenOwnerCache) {
  const tdb = await testDatabase(t);
  // The application role, so every statement also proves its grants.
  const { db, uow } = testUnitOfWork(t, tdb, {
    applicationName: 'identity-service-test',
    backoffBaseMs: 1,
  });
  const clock = new ManualClock(START);
  const service = new IdentityService({
    uow,
    clock,
    principals: new PgPrincipalRepository(db),
    tokens: new PgApiTokenRepository(db),
    ...(tokenCache === undefined ? {} : { tokenCache }),
  });
  return { tdb, db, uow, clock, service };
}

/** Every 8-character window of a string. */
function windows(s: string, size = 8): string[] {
  return Array.from({ length: s.length - size + 1 }, (_, i) => s.slice(i, i + size));
}

function appCode(err: unknown): string | undefined {
  return isAppError(err) ? err.code : undefined;
}

void t.test('createPrincipal stores the principal and issues a first token', async (t) => {
  const { tdb, service, clock } = await setup(t);
  const created = await service.createPrincipal({ kind: 'service', displayName: 'Billing job' });
  t.equal(created.principal.kind, 'service');
  t.equal(created.principal.displayName, 'Billing job');
  t.same(created.principal.createdAt, clock.now());
  t.equal(created.principal.disabledAt, null);
  t.match(created.token.token, /^tok_[a-z2-7]{8}\.[A-Za-z0-9_-]{43}$/);
  t.equal(created.token.name, 'initial', 'the first token is named for what it is');
  t.equal(created.token.expiresAt, null, 'the first token does not expire');
  const [row] = await tdb.owner<{ kind: string; display_name: string; created_at: Date }[]>`
    select kind, display_name, created_at from principals where id = ${created.principal.id}`;
  t.same(row, { kind: 'service', display_name: 'Billing job', created_at: clock.now() });
  const actor = await service.authenticate(created.token.token, clock.now());
  t.same(actor, {
    kind: 'principal',
    principalId: created.principal.id,
    principalKind: 'service',
    tokenId: created.token.id,
  });
});

void t.test('createPrincipal refuses a bad kind or display name and writes nothing', async (t) => {
  const { tdb, service } = await setup(t);
  const bad: [string, { kind: string; displayName: string }, string][] = [
    ['unknown kind', { kind: 'robot', displayName: 'R' }, '#body/kind'],
    ['empty name', { kind: 'user', displayName: '' }, '#body/display_name'],
    ['blank name', { kind: 'user', displayName: '   ' }, '#body/display_name'],
    ['control character', { kind: 'user', displayName: 'a\u0007b' }, '#body/display_name'],
    ['lone surrogate', { kind: 'user', displayName: 'a\ud800b' }, '#body/display_name'],
    ['too long', { kind: 'user', displayName: 'x'.repeat(201) }, '#body/display_name'],
    ['far too long', { kind: 'user', displayName: 'x'.repeat(100_000) }, '#body/display_name'],
  ];
  for (const [label, input, pointer] of bad) {
    const err: unknown = await service
      .createPrincipal(input as { kind: 'user'; displayName: string })
      .catch((e: unknown) => e);
    t.equal(appCode(err), 'validation_failed', label);
    t.equal(isAppError(err) ? err.errors?.[0]?.pointer : undefined, pointer, `${label}: pointer`);
  }
  const ok = await service.createPrincipal({ kind: 'user', displayName: '😀'.repeat(200) });
  t.equal(ok.principal.displayName.length, 400, '200 code points fit, however many UTF-16 units');
  const [row] = await tdb.owner<{ n: string }[]>`select count(*) as n from principals`;
  t.equal(row?.n, '1', 'only the valid principal was written');
});

void t.test('createToken returns the secret once; the database holds only its hash', async (t) => {
  const { tdb, service, clock } = await setup(t);
  const { principal } = await service.createPrincipal({ kind: 'user', displayName: 'Ada' });
  clock.advance(1000);
  const issued = await service.createToken(principal.id, {
    name: 'laptop',
    expiresInSeconds: 3600,
  });
  t.equal(issued.name, 'laptop');
  t.same(issued.createdAt, clock.now());
  t.same(issued.expiresAt, new Date(clock.now().getTime() + 3600_000));
  t.equal(issued.prefix, issued.token.slice(0, 12));

  const rows = await tdb.owner<Record<string, unknown>[]>`
    select to_jsonb(t)::text as as_text, encode(secret_sha256, 'hex') as hash_hex,
           encode(secret_sha256, 'base64') as hash_base64, encode(convert_to(to_jsonb(t)::text, 'UTF8'), 'hex') as text_hex
      from api_tokens t where id = ${issued.id}`;
  t.equal(rows.length, 1);
  const stored = Object.values(rows[0] ?? {}).join('\n');
  const secret = issued.token.slice(13);
  const secretHex = Buffer.from(secret, 'base64url').toString('hex');
  const leaks = [...windows(secret), ...windows(secretHex, 16)].filter((w) =>
    stored.toLowerCase().includes(w.toLowerCase()),
  );
  t.same(leaks, [], 'no 8-character piece of the secret (nor 8 bytes of it in hex) is stored');
  t.match(stored, issued.prefix, 'the public prefix is stored, as it should be');
  const [hash] = await tdb.owner<
    { h: Buffer }[]
  >`select secret_sha256 as h from api_tokens where id = ${issued.id}`;
  const { createHash } = await import('node:crypto');
  t.same(
    hash?.h,
    createHash('sha256').update(issued.token).digest(),
    'the stored value is the SHA-256',
  );

  const listed = await service.listTokens(principal.id);
  t.notOk(JSON.stringify(listed).includes(secret), 'a listing never carries the secret');
});

void t.test('createToken validates its options and needs an enabled principal', async (t) => {
  const { service } = await setup(t);
  const { principal } = await service.createPrincipal({ kind: 'user', displayName: 'Ada' });
  const bad: [string, { name?: string; expiresInSeconds?: number }, string][] = [
    ['empty name', { name: '' }, '#body/name'],
    ['long name', { name: 'n'.repeat(101) }, '#body/name'],
    ['control in name', { name: 'a\nb' }, '#body/name'],
    ['short expiry', { expiresInSeconds: 59 }, '#body/expires_in_seconds'],
    ['long expiry', { expiresInSeconds: 31536001 }, '#body/expires_in_seconds'],
    ['fractional expiry', { expiresInSeconds: 60.5 }, '#body/expires_in_seconds'],
  ];
  for (const [label, options, pointer] of bad) {
    const err: unknown = await service.createToken(principal.id, options).catch((e: unknown) => e);
    t.equal(appCode(err), 'validation_failed', label);
    t.equal(isAppError(err) ? err.errors?.[0]?.pointer : undefined, pointer, `${label}: pointer`);
  }
  const bounds = await Promise.all([
    service.createToken(principal.id, { expiresInSeconds: 60 }),
    service.createToken(principal.id, { expiresInSeconds: 31536000, name: 'n'.repeat(100) }),
  ]);
  t.equal(bounds.length, 2, 'the bounds themselves are accepted');
  t.equal(bounds[0].name, null, 'an unnamed token has a null name');
  await t.rejects(service.createToken(newId(), {}), { code: 'not_found' }, 'unknown principal');
  await service.disablePrincipal(principal.id);
  await t.rejects(
    service.createToken(principal.id),
    { code: 'not_found' },
    'a disabled principal gets no new token',
  );
});

void t.test('authenticate accepts only valid tokens of enabled principals', async (t) => {
  const { service, clock } = await setup(t);
  const { principal, token: first } = await service.createPrincipal({
    kind: 'user',
    displayName: 'Ada',
  });
  const expiring = await service.createToken(principal.id, { expiresInSeconds: 60 });
  const revoked = await service.createToken(principal.id, { name: 'old' });
  await service.revokeToken(principal.id, revoked.id);

  const actor = await service.authenticate(expiring.token, clock.now());
  t.same(actor, {
    kind: 'principal',
    principalId: principal.id,
    principalKind: 'user',
    tokenId: expiring.id,
    tokenExpiresAt: expiring.expiresAt,
  });
  t.notOk(
    'tokenExpiresAt' in ((await service.authenticate(first.token, clock.now())) ?? {}),
    'a token without expiry gives none',
  );
  t.equal(await service.authenticate(revoked.token, clock.now()), null, 'revoked');
  const unknown = `${expiring.token.slice(0, 13)}${'A'.repeat(42)}A`;
  t.equal(await service.authenticate(unknown, clock.now()), null, 'unknown');
  t.equal(await service.authenticate('not a token', clock.now()), null, 'malformed');
  t.equal(await service.authenticate('', clock.now()), null, 'empty');
  t.equal(await service.authenticate(`${expiring.token} `, clock.now()), null, 'trailing space');

  const expiry = new Date(clock.now().getTime() + 60_000);
  t.ok(
    await service.authenticate(expiring.token, new Date(expiry.getTime() - 1)),
    'valid up to the last millisecond',
  );
  t.equal(await service.authenticate(expiring.token, expiry), null, 'expired at expires_at');
  clock.advance(61_000);
  t.equal(await service.authenticate(expiring.token, clock.now()), null, 'expired later');
  t.ok(await service.authenticate(first.token, clock.now()), 'a token without expiry lives on');

  await service.disablePrincipal(principal.id);
  t.equal(
    await service.authenticate(first.token, clock.now()),
    null,
    'a disabled principal is refused',
  );
});

void t.test("revokeToken affects only the caller's own tokens", async (t) => {
  const { service, clock, tdb } = await setup(t);
  const alice = await service.createPrincipal({ kind: 'user', displayName: 'Alice' });
  const bob = await service.createPrincipal({ kind: 'user', displayName: 'Bob' });

  const err: unknown = await service
    .revokeToken(alice.principal.id, bob.token.id)
    .catch((e: unknown) => e);
  t.equal(appCode(err), 'not_found', "another principal's token is not found");
  t.notMatch(
    isAppError(err) ? err.detail : '',
    /another|owner|belongs/i,
    'the refusal does not hint that the token exists',
  );
  const missing: unknown = await service
    .revokeToken(alice.principal.id, newId())
    .catch((e: unknown) => e);
  t.same(
    isAppError(missing) && isAppError(err) ? [missing.code, missing.detail] : [],
    isAppError(err) ? [err.code, err.detail] : [null],
    'a foreign token and a missing one are answered alike',
  );
  t.ok(await service.authenticate(bob.token.token, clock.now()), "Bob's token still works");

  clock.advance(5000);
  const revokedAt = clock.now();
  await service.revokeToken(bob.principal.id, bob.token.id);
  t.equal(await service.authenticate(bob.token.token, clock.now()), null);
  clock.advance(5000);
  await service.revokeToken(bob.principal.id, bob.token.id);
  const [row] = await tdb.owner<{ revoked_at: Date }[]>`
    select revoked_at from api_tokens where id = ${bob.token.id}`;
  t.same(row?.revoked_at, revokedAt, 'revoking twice succeeds and keeps the first time');
});

void t.test("listTokens pages through the caller's tokens, newest first", async (t) => {
  const { service, clock } = await setup(t);
  const alice = await service.createPrincipal({ kind: 'user', displayName: 'Alice' });
  await service.createPrincipal({ kind: 'user', displayName: 'Bob' });
  const made = [alice.token];
  for (let i = 0; i < 4; i += 1) {
    clock.advance(1000);
    made.push(await service.createToken(alice.principal.id, { name: `t${String(i)}` }));
  }
  await service.revokeToken(alice.principal.id, made[1]!.id);
  const all = await service.listTokens(alice.principal.id);
  t.same(
    all.items.map((x) => x.id),
    made.map((x) => x.id).reverse(),
    "all five of Alice's, newest first, none of Bob's",
  );
  t.equal(all.nextCursor, null);
  t.ok(all.items.find((x) => x.id === made[1]!.id)?.revokedAt, 'revoked ones show when');
  t.same(Object.keys(all.items[0] ?? {}).sort(), [
    'createdAt',
    'expiresAt',
    'id',
    'name',
    'prefix',
    'revokedAt',
  ]);

  const page1 = await service.listTokens(alice.principal.id, { limit: 2 });
  t.equal(page1.items.length, 2);
  t.equal(page1.nextCursor, page1.items[1]?.id);
  const page2 = await service.listTokens(alice.principal.id, {
    limit: 2,
    cursor: page1.nextCursor!,
  });
  const page3 = await service.listTokens(alice.principal.id, {
    limit: 2,
    cursor: page2.nextCursor!,
  });
  t.same(
    [...page1.items, ...page2.items, ...page3.items].map((x) => x.id),
    all.items.map((x) => x.id),
  );
  t.equal(page3.items.length, 1);
  t.equal(page3.nextCursor, null, 'a short page is the last');
  await t.rejects(
    service.listTokens(alice.principal.id, { limit: 0 }),
    { code: 'validation_failed' },
    'limit below 1',
  );
  await t.rejects(
    service.listTokens(alice.principal.id, { limit: 101 }),
    { code: 'validation_failed' },
    'limit above 100',
  );
});

void t.test('the directory finds principals and tells disabled ones', async (t) => {
  const { service, clock } = await setup(t);
  const { principal } = await service.createPrincipal({ kind: 'service', displayName: 'Cron' });
  t.same(await service.find(principal.id), principal);
  t.equal(await service.find(newId()), null, 'unknown id');
  clock.advance(1000);
  await service.disablePrincipal(principal.id);
  const disabledAt = clock.now();
  clock.advance(1000);
  await service.disablePrincipal(principal.id);
  t.same(
    (await service.find(principal.id))?.disabledAt,
    disabledAt,
    'disabling twice keeps the first time',
  );
  await t.rejects(service.disablePrincipal(newId()), { code: 'not_found' });
});

void t.test('a write that fails leaves nothing behind', async (t) => {
  const { tdb, service, uow } = await setup(t);
  await t.rejects(
    uow.run(async () => {
      await service.createPrincipal({ kind: 'user', displayName: 'Ghost' });
      throw new Error('later step failed');
    }),
    /later step failed/,
  );
  const [row] = await tdb.owner<{ p: string; k: string }[]>`
    select (select count(*) from principals) as p, (select count(*) from api_tokens) as k`;
  t.same(row, { p: '0', k: '0' }, 'the use case joined the outer unit of work');
});

void t.test(
  'a token revoked inside an outer unit of work is refused by this process once it commits, with no notice heard',
  async (t) => {
    // A cache that is live but hears nothing: no listener is connected, so
    // only what the service itself does can drop the cached token.
    const cache = new TokenOwnerCache({ ttlMs: 60_000, maxEntries: 100 });
    cache.setLive(true);
    const { service, uow, clock } = await setup(t, cache);
    const { principal, token } = await service.createPrincipal({
      kind: 'user',
      displayName: 'Ada',
    });
    t.ok(await service.authenticate(token.token, clock.now()), 'valid, and now cached');
    t.equal(cache.size, 1);
    // A request of another caller reads the token while the revocation is
    // not committed yet: it runs outside the unit of work, so it still
    // sees the token valid, and that answer must not be kept.
    let reached: () => void = () => undefined;
    const revoked = new Promise<void>((resolve) => (reached = resolve));
    const concurrent = revoked.then(() => service.authenticate(token.token, clock.now()));
    await uow.run(async () => {
      await service.revokeToken(principal.id, token.id);
      reached();
      t.ok(await concurrent, 'a read before the commit still sees the token');
    });
    t.equal(cache.size, 0, 'the entry was dropped by the revocation');
    t.equal(
      await service.authenticate(token.token, clock.now()),
      null,
      'refused at once after the commit',
    );
    t.equal(cache.size, 0, 'nothing stale stored meanwhile');
  },
);
