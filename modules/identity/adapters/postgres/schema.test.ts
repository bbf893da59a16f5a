import t from 'tap';
import { testDatabase } from '../../../../test/harness/db.js';

// The migration read back from pg_catalog: what the application role may do
// is part of the contract, so it is checked here rather than trusted.

void t.test('principals and api_tokens have the documented columns', async (t) => {
  const tdb = await testDatabase(t);
  const columns = await tdb.owner<
    { table_name: string; column_name: string; data_type: string; is_nullable: string }[]
  >`
    select table_name, column_name, data_type, is_nullable
      from information_schema.columns
     where table_schema = 'public' and table_name in ('principals', 'api_tokens')
     order by table_name, ordinal_position`;
  t.same(
    columns.map((c) => `${c.table_name}.${c.column_name} ${c.data_type} ${c.is_nullable}`),
    [
      'api_tokens.id uuid NO',
      'api_tokens.principal_id uuid NO',
      'api_tokens.secret_sha256 bytea NO',
      'api_tokens.prefix text NO',
      'api_tokens.name text YES',
      'api_tokens.created_at timestamp with time zone NO',
      'api_tokens.expires_at timestamp with time zone YES',
      'api_tokens.revoked_at timestamp with time zone YES',
      'principals.id uuid NO',
      'principals.kind text NO',
      'principals.display_name text NO',
      'principals.created_at timestamp with time zone NO',
      'principals.disabled_at timestamp with time zone YES',
    ],
  );
  const [fk] = await tdb.owner<{ def: string }[]>`
    select pg_get_constraintdef(oid) as def from pg_constraint
     where conrelid = 'api_tokens'::regclass and contype = 'f'`;
  t.equal(fk?.def, 'FOREIGN KEY (principal_id) REFERENCES principals(id) ON DELETE CASCADE');
  const indexes = await tdb.owner<{ def: string }[]>`
    select indexdef as def from pg_indexes where tablename = 'api_tokens' order by indexname`;
  t.ok(
    indexes.some((i) => /\(principal_id\b/.test(i.def)),
    'an index leads with principal_id (FK cascade and listing)',
  );
  t.ok(
    indexes.some((i) => /UNIQUE INDEX .* \(secret_sha256\)/.test(i.def)),
    'the hash is unique',
  );
  const comments = await tdb.owner<{ c: string | null }[]>`
    select obj_description('principals'::regclass, 'pg_class') as c
    union all select obj_description('api_tokens'::regclass, 'pg_class')`;
  t.ok(
    comments.every((c) => (c.c ?? '').length > 0),
    'both tables carry a comment',
  );
});

void t.test('the application role holds exactly the privileges the code uses', async (t) => {
  const tdb = await testDatabase(t);
  const app = tdb.state.app.name;
  const tablePrivileges = await tdb.owner<{ table_name: string; privilege_type: string }[]>`
    select table_name, privilege_type from information_schema.role_table_grants
     where grantee = ${app} and table_name in ('principals', 'api_tokens')
     order by table_name, privilege_type`;
  t.same(
    tablePrivileges.map((p) => `${p.table_name} ${p.privilege_type}`),
    ['api_tokens INSERT', 'api_tokens SELECT', 'principals INSERT', 'principals SELECT'],
    'no table-wide UPDATE, DELETE, TRUNCATE, REFERENCES or TRIGGER',
  );
  const columnUpdates = await tdb.owner<{ table_name: string; column_name: string }[]>`
    select table_name, column_name from information_schema.column_privileges
     where grantee = ${app} and privilege_type = 'UPDATE'
       and table_name in ('principals', 'api_tokens')
     order by table_name, column_name`;
  t.same(
    columnUpdates.map((c) => `${c.table_name}.${c.column_name}`),
    ['api_tokens.revoked_at', 'principals.disabled_at'],
    'only revocation and disabling are updates',
  );
});

void t.test('the constraints refuse what the code never writes', async (t) => {
  const tdb = await testDatabase(t);
  const id = '01890a5d-ac96-774b-bcce-b302099a8057';
  await t.rejects(
    tdb.owner`insert into principals (id, kind, display_name) values (${id}, 'robot', 'x')`,
    { code: '23514' },
    'unknown kind',
  );
  await t.rejects(
    tdb.owner`insert into principals (id, kind, display_name) values (${id}, 'user', '')`,
    { code: '23514' },
    'empty display name',
  );
  await t.rejects(
    tdb.owner`insert into principals (id, kind, display_name) values (${id}, 'user', ${'x'.repeat(201)})`,
    { code: '23514' },
    'display name over 200 characters',
  );
  await tdb.owner`insert into principals (id, kind, display_name) values (${id}, 'user', ${'é'.repeat(200)})`;
  const tokenId = '01890a5d-ac96-774b-bcce-b302099a8058';
  const insertToken = (hash: Buffer, prefix: string, name: string | null, expires: Date | null) =>
    tdb.owner`insert into api_tokens (id, principal_id, secret_sha256, prefix, name, created_at, expires_at)
              values (${tokenId}, ${id}, ${hash}, ${prefix}, ${name}, ${new Date('2030-01-01T00:00:00Z')}, ${expires})`;
  await t.rejects(
    insertToken(Buffer.alloc(31), 'tok_abcdefgh', null, null),
    { code: '23514' },
    'hash of the wrong length',
  );
  await t.rejects(
    insertToken(Buffer.alloc(32), 'tok_ABCDEFGH', null, null),
    { code: '23514' },
    'prefix outside the format',
  );
  await t.rejects(
    insertToken(Buffer.alloc(32), 'tok_abcdefgh', '', null),
    { code: '23514' },
    'empty name',
  );
  await t.rejects(
    insertToken(Buffer.alloc(32), 'tok_abcdefgh', null, new Date('2030-01-01T00:00:00Z')),
    { code: '23514' },
    'expiry not after creation',
  );
  await insertToken(Buffer.alloc(32), 'tok_abcdefgh', 'n'.repeat(100), null);
  const [row] = await tdb.owner<{ n: string }[]>`select count(*) as n from api_tokens`;
  t.equal(row?.n, '1', 'a well-formed row is accepted');
});

void t.test(
  'a revoked, removed, re-dated or re-keyed token and a disabled, re-kinded or removed principal notify identity_credentials on commit, with the principal id',
  async (t) => {
    const tdb = await testDatabase(t);
    const seen: string[] = [];
    const listening = await tdb.app.listen('identity_credentials', (payload) => seen.push(payload));
    t.teardown(() => listening.unlisten());
    const a = '01920000-0000-7000-8000-00000000000a';
    const b = '01920000-0000-7000-8000-00000000000b';
    const tok = (n: number) => `01920000-0000-7000-8000-0000000001${String(n).padStart(2, '0')}`;
    await tdb.owner`insert into principals (id, kind, display_name) values (${a}, 'user', 'A'), (${b}, 'user', 'B')`;
    for (const [n, owner] of [
      [1, a],
      [2, a],
      [3, b],
    ] as const) {
      await tdb.owner`
        insert into api_tokens (id, principal_id, secret_sha256, prefix, created_at)
        values (${tok(n)}, ${owner}, ${Buffer.alloc(32, n)}, ${`tok_aaaaaaa${String.fromCharCode(97 + n)}`}, now())`;
    }
    const settle = async (count: number) => {
      for (let i = 0; i < 200 && seen.length < count; i += 1) {
        await new Promise((r) => setTimeout(r, 10));
      }
      // A notice that should not come has had time to arrive.
      await new Promise((r) => setTimeout(r, 50));
    };
    await settle(0);
    t.same(seen, [], 'inserts notify nothing');
    await tdb.app`update api_tokens set revoked_at = now() where id = ${tok(1)}`;
    await settle(1);
    t.same(seen, [a], 'the application role revoking a token notifies its principal');
    await tdb.app
      .begin(async (tx) => {
        await tx`update principals set disabled_at = now() where id = ${b}`;
        throw new Error('roll back');
      })
      .catch(() => undefined);
    await settle(1);
    t.same(seen, [a], 'a rolled back change notifies nothing');
    await tdb.app`update principals set disabled_at = now() where id = ${b}`;
    await settle(2);
    t.same(seen, [a, b], 'disabling a principal notifies it');
    await tdb.owner`delete from api_tokens where id = ${tok(2)}`;
    await settle(3);
    t.same(seen, [a, b, a], 'removing a token notifies its principal');
    await tdb.owner`delete from principals where id = ${b}`;
    await settle(4);
    // Its cascaded token notifies the same payload in the same transaction,
    // which PostgreSQL delivers once.
    t.same(seen.slice(3), [b], 'removing a principal notifies it');
    await tdb.owner`update principals set display_name = 'renamed' where id = ${a}`;
    await tdb.owner`update api_tokens set name = 'renamed' where id = ${tok(1)}`;
    await settle(4);
    t.equal(seen.length, 4, 'a change that leaves credentials usable notifies nothing');
    await tdb.app`update api_tokens set revoked_at = coalesce(revoked_at, now()) where id = ${tok(1)}`;
    await settle(4);
    t.equal(seen.length, 4, 'revoking a revoked token again notifies nothing');
    // The other watched columns: each decides whether a cached token may
    // still be served (its expiry, its secret, the kind an actor carries).
    const watched: [string, () => Promise<unknown>][] = [
      [
        'an expiry set',
        () =>
          tdb.owner`update api_tokens set expires_at = now() + interval '1 hour' where id = ${tok(1)}`,
      ],
      [
        'a secret replaced',
        () =>
          tdb.owner`update api_tokens set secret_sha256 = ${Buffer.alloc(32, 9)} where id = ${tok(1)}`,
      ],
      ['a kind changed', () => tdb.owner`update principals set kind = 'service' where id = ${a}`],
    ];
    for (const [what, change] of watched) {
      const before = seen.length;
      await change();
      await settle(before + 1);
      t.same(seen.slice(before), [a], `${what} notifies its principal`);
    }
    const n = seen.length;
    const c = '01920000-0000-7000-8000-00000000000c';
    await tdb.owner`insert into principals (id, kind, display_name) values (${c}, 'user', 'C')`;
    await tdb.owner`update api_tokens set principal_id = ${c} where id = ${tok(1)}`;
    await settle(n + 2);
    t.same(seen.slice(n).sort(), [a, c].sort(), 'a token moved to another principal notifies both');
    await tdb.owner`truncate api_tokens`;
    await settle(n + 3);
    t.same(seen.slice(n + 2), [c], 'truncating the tokens notifies every principal that had one');
    await tdb.owner`truncate principals cascade`;
    await settle(n + 5);
    t.same(
      seen.slice(n + 3).sort(),
      [a, c].sort(),
      'truncating the principals notifies each of them',
    );
  },
);
