--! Previous: -
--! Hash: sha1:484a44e0cc86e2fad20cd4431a81b50137a06534
--! Message: grants scheme

-- The grants scheme. The server connects as the application role (:APP_ROLE)
-- and never runs DDL: it may use the public schema but not create in it, and
-- every table migration grants it exactly the privileges that table needs
-- (explicit per-table SELECT, INSERT, UPDATE, DELETE). Nothing is granted by
-- default privileges, so a new table is invisible to the server until its
-- migration says otherwise.
revoke create on schema public from public;
revoke all on schema public from :APP_ROLE;
grant usage on schema public to :APP_ROLE;
