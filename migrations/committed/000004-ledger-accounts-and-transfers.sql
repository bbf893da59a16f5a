--! Previous: sha1:440d808006070fa671101be0083449dabbe67b25
--! Hash: sha1:b78e58e5050ff72ed43ee6519d9b9325db625893
--! Message: ledger accounts and transfers

-- Ledger (module ledger, retention class durable): accounts of a principal
-- holding a balance in minor units of the one currency, and the transfers
-- between them. Amounts and balances are bigint but capped at 2^53 - 1
-- (9007199254740991), the largest integer every JSON parser reads exactly.

create table ledger_accounts (
  id uuid primary key,
  principal_id uuid not null references principals (id) on delete cascade,
  name text not null
    constraint ledger_accounts_name_check check (char_length(name) between 1 and 100),
  opening_balance bigint not null
    constraint ledger_accounts_opening_balance_check
      check (opening_balance between 0 and 9007199254740991),
  balance bigint not null
    constraint ledger_accounts_balance_check check (balance >= 0)
    constraint ledger_accounts_balance_max_check check (balance <= 9007199254740991),
  version integer not null
    constraint ledger_accounts_version_check check (version >= 1),
  created_at timestamptz not null,
  updated_at timestamptz not null,
  -- The target of the transfers' composite foreign keys, so a transfer can
  -- only name accounts of its own principal; it also serves the cascade from
  -- principals.
  constraint ledger_accounts_principal_id_id_key unique (principal_id, id)
);

comment on table ledger_accounts is
  'Accounts of a principal: a name, the opening balance, the current balance in minor units, and a version that is the ETag. Module ledger; retention durable.';
comment on column ledger_accounts.opening_balance is
  'The balance the account was opened with; never changes. balance = opening_balance + incoming - outgoing transfers.';
comment on column ledger_accounts.version is
  'Starts at 1 and grows by one with every change (rename or transfer); sent as the ETag "<version>".';

create table ledger_transfers (
  id uuid primary key,
  principal_id uuid not null references principals (id) on delete cascade,
  from_account_id uuid not null,
  to_account_id uuid not null,
  amount bigint not null
    constraint ledger_transfers_amount_check check (amount between 1 and 9007199254740991),
  created_at timestamptz not null,
  constraint ledger_transfers_accounts_differ_check check (from_account_id <> to_account_id),
  constraint ledger_transfers_from_account_fkey foreign key (principal_id, from_account_id)
    references ledger_accounts (principal_id, id) on delete cascade,
  constraint ledger_transfers_to_account_fkey foreign key (principal_id, to_account_id)
    references ledger_accounts (principal_id, id) on delete cascade
);

-- Both lead with principal_id and serve the composite foreign keys (and the
-- cascade from principals).
create index ledger_transfers_from_account_idx on ledger_transfers (principal_id, from_account_id);
create index ledger_transfers_to_account_idx on ledger_transfers (principal_id, to_account_id);

comment on table ledger_transfers is
  'Transfers of an amount in minor units between two accounts of one principal; immutable once written. Module ledger; retention durable.';

-- The server opens accounts, renames them, moves balances and records
-- transfers: nothing is deleted, a transfer is never changed, and an
-- account's owner, opening balance and creation time never change.
grant select, insert on ledger_accounts to :APP_ROLE;
grant update (name, balance, version, updated_at) on ledger_accounts to :APP_ROLE;
grant select, insert on ledger_transfers to :APP_ROLE;
