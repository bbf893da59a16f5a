--! Previous: sha1:a79f2f7456d1c6c37cb4c739d9e7cdf194ac3c90
--! Hash: sha1:6746bdd64b791cbfd827dbf73e1de3ccdf9b39ca
--! Message: identity credentials notify tightened

-- Identity: the credential notices of 000006, tightened (token cache red
-- team). A token moved to another principal notifies both principals, not
-- only the new one. An update that changes none of the watched values (a
-- revocation repeated on a revoked token) notifies nothing, so a caller
-- cannot make every api process drop entries at its rate limit. TRUNCATE,
-- which fires no row trigger, notifies every principal that had a row.

create or replace function identity_notify_credentials() returns trigger
  language plpgsql
  set search_path = pg_catalog
as $$
begin
  if tg_table_name = 'principals' then
    perform pg_notify('identity_credentials', coalesce(new.id, old.id)::text);
  else
    perform pg_notify('identity_credentials', coalesce(new.principal_id, old.principal_id)::text);
    if tg_op = 'UPDATE' and old.principal_id is distinct from new.principal_id then
      perform pg_notify('identity_credentials', old.principal_id::text);
    end if;
  end if;
  return null;
end;
$$;

create or replace function identity_notify_credentials_truncate() returns trigger
  language plpgsql
  set search_path = pg_catalog, public
as $$
begin
  if tg_table_name = 'principals' then
    perform pg_notify('identity_credentials', id::text) from principals;
  else
    perform pg_notify('identity_credentials', principal_id::text)
       from (select distinct principal_id from api_tokens) as owners;
  end if;
  return null;
end;
$$;

comment on function identity_notify_credentials_truncate() is
  'Before TRUNCATE of principals or api_tokens, notifies channel identity_credentials once per principal that has a row. Module identity.';

drop trigger if exists api_tokens_notify_credentials on api_tokens;
drop trigger if exists api_tokens_notify_credentials_update on api_tokens;
create trigger api_tokens_notify_credentials_update
  after update of revoked_at, expires_at, principal_id, secret_sha256 on api_tokens
  for each row
  when (old.revoked_at is distinct from new.revoked_at
        or old.expires_at is distinct from new.expires_at
        or old.principal_id is distinct from new.principal_id
        or old.secret_sha256 is distinct from new.secret_sha256)
  execute function identity_notify_credentials();
drop trigger if exists api_tokens_notify_credentials_delete on api_tokens;
create trigger api_tokens_notify_credentials_delete
  after delete on api_tokens
  for each row execute function identity_notify_credentials();
drop trigger if exists api_tokens_notify_credentials_truncate on api_tokens;
create trigger api_tokens_notify_credentials_truncate
  before truncate on api_tokens
  for each statement execute function identity_notify_credentials_truncate();

drop trigger if exists principals_notify_credentials on principals;
drop trigger if exists principals_notify_credentials_update on principals;
create trigger principals_notify_credentials_update
  after update of disabled_at, kind on principals
  for each row
  when (old.disabled_at is distinct from new.disabled_at or old.kind is distinct from new.kind)
  execute function identity_notify_credentials();
drop trigger if exists principals_notify_credentials_delete on principals;
create trigger principals_notify_credentials_delete
  after delete on principals
  for each row execute function identity_notify_credentials();
drop trigger if exists principals_notify_credentials_truncate on principals;
create trigger principals_notify_credentials_truncate
  before truncate on principals
  for each statement execute function identity_notify_credentials_truncate();
