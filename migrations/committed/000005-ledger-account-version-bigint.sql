--! Previous: sha1:b78e58e5050ff72ed43ee6519d9b9325db625893
--! Hash: sha1:441972ee9094a0d6f16172dd8b6564f3cb72fd8c
--! Message: ledger account version bigint

-- An account's version grows with every transfer and rename; at a thousand
-- transfers a second an integer would overflow in under a month and every
-- later write to the account would fail. bigint leaves room for centuries.
alter table ledger_accounts alter column version type bigint;
