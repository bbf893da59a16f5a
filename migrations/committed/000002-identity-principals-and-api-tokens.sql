--! Previous: sha1:484a44e0cc86e2fad20cd4431a81b50137a06534
--! Hash: sha1:44b2b0d83bc939fb7d2dc8b01a45a100c28c1404
--! Message: identity principals and api tokens

-- Identity: the principals that may call the API and the API tokens they
-- authenticate with. Owned by module identity; retention class durable.

create table principals (
  id uuid primary key,
  kind text not null
    constraint principals_kind_check check (kind in ('user', 'service')),
  display_name text not null
    constraint principals_display_name_check check (char_length(display_name) between 1 and 200),
  created_at timestamptz not null default now(),
  disabled_at timestamptz null
);

comment on table principals is
  'Who may call the API: a person (user) or another system (service). A disabled principal keeps its rows but no longer authenticates. Module identity; retention durable.';
comment on column principals.disabled_at is
  'When set, every token of the principal is refused.';

create table api_tokens (
  id uuid primary key,
  principal_id uuid not null references principals (id) on delete cascade,
  -- Only the SHA-256 of the whole token is kept: a copy of this table
  -- authenticates nobody.
  secret_sha256 bytea not null unique
    constraint api_tokens_secret_sha256_check check (octet_length(secret_sha256) = 32),
  prefix text not null
    constraint api_tokens_prefix_check check (prefix ~ '^tok_[a-z2-7]{8}$'),
  name text null
    constraint api_tokens_name_check check (char_length(name) between 1 and 100),
  created_at timestamptz not null,
  expires_at timestamptz null
    constraint api_tokens_expires_at_check check (expires_at > created_at),
  revoked_at timestamptz null
);

-- Leads with principal_id for the foreign key's cascade and for listing a
-- principal's tokens newest first (ids are UUIDv7, so id order is creation order).
create index api_tokens_principal_id_idx on api_tokens (principal_id, id);

comment on table api_tokens is
  'Bearer tokens of principals. Holds the SHA-256 of each token and its public prefix, never the secret. Module identity; retention durable.';
comment on column api_tokens.secret_sha256 is
  'SHA-256 of the whole token as sent after "Bearer ".';
comment on column api_tokens.prefix is
  'The public part of the token, shown to its owner to tell tokens apart.';

-- Creating principals and tokens, revoking a token and disabling a principal
-- are all the server does: no deletes, and updates only of those two columns.
grant select, insert on principals to :APP_ROLE;
grant update (disabled_at) on principals to :APP_ROLE;
grant select, insert on api_tokens to :APP_ROLE;
grant update (revoked_at) on api_tokens to :APP_ROLE;
