--! Previous: sha1:441972ee9094a0d6f16172dd8b6564f3cb72fd8c
--! Hash: sha1:a79f2f7456d1c6c37cb4c739d9e7cdf194ac3c90
--! Message: identity credentials notify

-- Identity: tell every api process when a credential stops being usable, so
-- a process may keep an in-memory cache of token lookups. A trigger, not the
-- application, sends the notice, so a revocation by any path (the API, the
-- admin CLI, plain SQL) reaches every cache. NOTIFY is delivered on commit,
-- to every session listening on the channel, and never for a rollback.
-- The payload is the principal's id: a listener drops every cached token of
-- that principal. Token inserts send nothing (a cache holds only tokens it
-- has read, and a new token is not in any cache).

create or replace function identity_notify_credentials() returns trigger
  language plpgsql
  set search_path = pg_catalog
as $$
begin
  if tg_table_name = 'principals' then
    perform pg_notify('identity_credentials', coalesce(new.id, old.id)::text);
  else
    perform pg_notify('identity_credentials', coalesce(new.principal_id, old.principal_id)::text);
  end if;
  return null;
end;
$$;

comment on function identity_notify_credentials() is
  'Notifies channel identity_credentials with the principal id when a token is revoked or removed or a principal is disabled or removed. Module identity.';

drop trigger if exists api_tokens_notify_credentials on api_tokens;
create trigger api_tokens_notify_credentials
  after update of revoked_at, expires_at, principal_id, secret_sha256 or delete on api_tokens
  for each row execute function identity_notify_credentials();

drop trigger if exists principals_notify_credentials on principals;
create trigger principals_notify_credentials
  after update of disabled_at, kind or delete on principals
  for each row execute function identity_notify_credentials();
