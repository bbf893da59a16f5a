/**
 * The migration creates idempotency_keys exactly as specified, read back from
 * pg_catalog: columns, types, nullability, defaults, CHECK, primary key,
 * foreign key, index and grants.
 */
import t from 'tap';
import { testDatabase } from '../../../../test/harness/db.js';

void t.test('idempotency_keys matches the specification', async (t) => {
  const db = await testDatabase(t);
  const columns = await db.owner<
    { name: string; type: string; not_null: boolean; default: string | null }[]
  >`
    select a.attname as name, format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as not_null,
           pg_get_expr(d.adbin, d.adrelid) as default
      from pg_attribute a
      left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
     where a.attrelid = 'public.idempotency_keys'::regclass and a.attnum > 0 and not a.attisdropped
     order by a.attnum`;
  t.same(
    columns.map((c) => ({ ...c })),
    [
      { name: 'principal_id', type: 'uuid', not_null: true, default: null },
      { name: 'key', type: 'uuid', not_null: true, default: null },
      { name: 'action', type: 'text', not_null: true, default: null },
      { name: 'request_sha256', type: 'bytea', not_null: true, default: null },
      { name: 'state', type: 'text', not_null: true, default: "'in_progress'::text" },
      { name: 'response_status', type: 'smallint', not_null: false, default: null },
      { name: 'response_body', type: 'jsonb', not_null: false, default: null },
      { name: 'resource_id', type: 'uuid', not_null: false, default: null },
      { name: 'created_at', type: 'timestamp with time zone', not_null: true, default: 'now()' },
      { name: 'expires_at', type: 'timestamp with time zone', not_null: true, default: null },
    ],
  );
  const constraints = await db.owner<{ type: string; def: string }[]>`
    select contype as type, pg_get_constraintdef(oid) as def
      from pg_constraint where conrelid = 'public.idempotency_keys'::regclass and contype <> 'n' order by contype, conname`;
  t.same(
    constraints.map((c) => ({ ...c })),
    [
      { type: 'c', def: "CHECK ((state = ANY (ARRAY['in_progress'::text, 'completed'::text])))" },
      { type: 'f', def: 'FOREIGN KEY (principal_id) REFERENCES principals(id) ON DELETE CASCADE' },
      { type: 'p', def: 'PRIMARY KEY (principal_id, key)' },
    ],
  );
  const indexes = await db.owner<{ def: string }[]>`
    select pg_get_indexdef(indexrelid) as def from pg_index
     where indrelid = 'public.idempotency_keys'::regclass and not indisprimary`;
  t.same(
    indexes.map((i) => i.def),
    [
      'CREATE INDEX idempotency_keys_expires_at_idx ON public.idempotency_keys USING btree (expires_at)',
    ],
  );
  const grants = await db.owner<{ privilege_type: string }[]>`
    select privilege_type from information_schema.role_table_grants
     where table_name = 'idempotency_keys' and grantee = ${db.state.app.name} order by privilege_type`;
  t.same(
    grants.map((g) => g.privilege_type),
    ['DELETE', 'INSERT', 'SELECT', 'UPDATE'],
    'the application role gets exactly these',
  );
  const [owner] = await db.owner<{ owner: string }[]>`
    select pg_get_userbyid(relowner) as owner from pg_class where oid = 'public.idempotency_keys'::regclass`;
  t.equal(owner?.owner, db.state.owner.name, 'owned by the owner role, not the application role');
});
