--! Previous: sha1:6746bdd64b791cbfd827dbf73e1de3ccdf9b39ca
--! Hash: sha1:7078fd93bbbbc3567f685c36f38a91d579dc46ad
--! Message: sync idempotency keys fillfactor

-- Room on each page for the completion of the keys inserted there: the
-- completion changes no indexed column, so with free space on the page it
-- is a HOT update (no index entry written, the old version pruned in
-- place); pages filled to the brim by concurrent inserts made about one
-- completion in thirty a full update under 16 parallel requests.
alter table idempotency_keys set (fillfactor = 70);
