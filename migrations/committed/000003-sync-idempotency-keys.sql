--! Previous: sha1:44b2b0d83bc939fb7d2dc8b01a45a100c28c1404
--! Hash: sha1:440d808006070fa671101be0083449dabbe67b25
--! Message: sync idempotency keys

-- Idempotency keys (module sync, retention class transient): one row per
-- (principal, key). The row is inserted in_progress by the request's own
-- transaction and completed in the same transaction as the request's effect,
-- so an uncommitted row is invisible and a crash leaves nothing behind.
create table idempotency_keys (
  principal_id uuid not null references principals (id) on delete cascade,
  key uuid not null,
  action text not null,
  request_sha256 bytea not null,
  state text not null default 'in_progress' check (state in ('in_progress', 'completed')),
  response_status smallint null,
  response_body jsonb null,
  resource_id uuid null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  primary key (principal_id, key)
);
create index idempotency_keys_expires_at_idx on idempotency_keys (expires_at);
comment on table idempotency_keys is
  'Idempotency keys and their final answers, per principal; transient: rows expire (sync.idempotency_key_ttl) and the sync:idempotency_cleanup job deletes them.';
grant select, insert, update, delete on idempotency_keys to :APP_ROLE;
