/**
 * A server process killed with SIGKILL in the middle of a keyed transfer
 * leaves nothing behind, and the client's retry with the same key takes
 * effect exactly once.
 *
 * The test holds one of the two accounts with `SELECT ... FOR UPDATE` in an
 * owner transaction, so the server's transfer blocks INSIDE its transaction:
 * it has already inserted its idempotency key row (the wait is seen in
 * pg_stat_activity and pg_locks: the backend holds RowExclusiveLock on
 * idempotency_keys and waits on our transaction). The `api` process is then
 * killed with SIGKILL and the lock released. PostgreSQL rolls the orphaned
 * transaction back: no key row, no transfer, balances unchanged. A new `api`
 * process answers the retry (same key, same body) with 201 and moves the
 * money once; a further retry is a byte-identical replay; no key row is left
 * in progress. `SOAK=1` repeats the kill more times.
 */
import t from 'tap';
import { newId } from '../../kernel/ids/index.js';
import { createSql } from '../../platform/pg/client.js';
import { testDatabase } from '../harness/db.js';
import { bySoak } from '../harness/soak.js';
import { stopProcesses } from '../e2e/processes.js';
import {
  assertLedgerInvariants,
  balances,
  eventually,
  keysInProgress,
  newPrincipal,
  openAccount,
  post,
  startApi,
  type Answer,
  type ApiProcess,
} from './fault-helpers.js';

/** How many times a process is killed mid-transfer. */
const ROUNDS = bySoak(2, 6);
const OPENING = 1_000_000;

void t.test('SIGKILL inside a keyed transfer: rolled back, the retry applies once', async (t) => {
  const db = await testDatabase(t);
  const admin = createSql(db.adminUrl, { max: 1, applicationName: 'test-observer' });
  const all: ApiProcess[] = [];
  t.teardown(async () => {
    await stopProcesses(all.map((a) => a.process));
    await admin.end({ timeout: 1 });
  });
  // The blocked transfer must still be waiting when the process dies: the
  // server's lock, statement and transaction timeouts are raised far beyond
  // anything the test waits for.
  const env = {
    DATABASE__LOCK_TIMEOUT: '10m',
    DATABASE__STATEMENT_TIMEOUT: '10m',
    DATABASE__TRANSACTION_TIMEOUT: '10m',
  };
  let api = await startApi(db.appUrl, env);
  all.push(api);
  const token = await newPrincipal(db.app);
  const openings = new Map<string, bigint>();
  const a = await openAccount(t, api.base, token, openings, 'From', OPENING);
  const b = await openAccount(t, api.base, token, openings, 'To', OPENING);
  const transferIds: string[] = [];
  let expected = { [a]: OPENING, [b]: OPENING };

  for (let round = 1; round <= ROUNDS; round += 1) {
    const key = newId();
    const amount = 100 + round;
    const body = JSON.stringify({ from_account_id: a, to_account_id: b, amount });
    // Alternate which account is held, so both lock positions are covered.
    const held = round % 2 === 1 ? a : b;

    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let lockTaken!: (pid: number) => void;
    const holderPid = new Promise<number>((resolve) => (lockTaken = resolve));
    const holder = db.owner.begin(async (tx) => {
      const [row] = await tx<{ pid: number }[]>`
        select pg_backend_pid() as pid from ledger_accounts where id = ${held} for update`;
      lockTaken(row?.pid ?? -1);
      await released;
    });
    const ownerPid = await holderPid;

    const pending: Promise<Answer | Error> = post(
      api.base,
      '/api/v1/transfers',
      token,
      body,
      key,
    ).catch((err: unknown) => err as Error);

    // The server's backend is inside its keyed transaction, blocked behind
    // our lock: it waits on a lock, our backend blocks it, it has written
    // (has an xid) and holds the row-exclusive lock of its key insert.
    let victim = -1;
    await eventually('the transfer blocks behind the held account', async () => {
      const rows = await admin<{ pid: number }[]>`
        select s.pid
          from pg_stat_activity s
         where s.datname = current_database()
           and s.usename = ${db.state.app.name}
           and s.wait_event_type = 'Lock'
           and ${ownerPid}::int = any(pg_blocking_pids(s.pid))
           and s.backend_xid is not null
           and exists (select 1 from pg_locks l
                        where l.pid = s.pid and l.granted
                          and l.relation = 'idempotency_keys'::regclass
                          and l.mode = 'RowExclusiveLock')`;
      victim = rows[0]?.pid ?? -1;
      return rows.length === 1;
    });
    t.pass(`round ${round}: backend ${victim} holds the key and waits on account ${held}`);

    api.process.child.kill('SIGKILL');
    await api.process.exited;
    const lost = await pending;
    t.ok(lost instanceof Error, `round ${round}: the killed process never answered`);

    release();
    await holder;
    await eventually('the orphaned backend has ended', async () => {
      const rows = await admin`select 1 from pg_stat_activity where pid = ${victim}`;
      return rows.length === 0;
    });

    const keyRows = await db.owner`select state from idempotency_keys where key = ${key}`;
    t.same(keyRows, [], `round ${round}: the orphaned key row was rolled back`);
    const transfers = await db.owner<{ id: string }[]>`select id from ledger_transfers order by id`;
    t.same(
      transfers.map((r) => r.id),
      transferIds,
      `round ${round}: the killed transfer left no row`,
    );
    t.same(await balances(db.owner), expected, `round ${round}: balances unchanged by the kill`);

    api = await startApi(db.appUrl, env);
    all.push(api);
    const retry = await post(api.base, '/api/v1/transfers', token, body, key);
    t.equal(retry.status, 201, `round ${round}: the retry with the same key runs: ${retry.body}`);
    t.equal(retry.replay, 'false', `round ${round}: the retry is an original answer, not a replay`);
    const made = JSON.parse(retry.body) as { id: string; amount: number };
    t.equal(made.amount, amount);
    transferIds.push(made.id);
    transferIds.sort();
    expected = { [a]: (expected[a] ?? 0) - amount, [b]: (expected[b] ?? 0) + amount };

    const replay = await post(api.base, '/api/v1/transfers', token, body, key);
    t.equal(replay.status, 201);
    t.equal(replay.replay, 'true', `round ${round}: a second retry is a replay`);
    t.equal(replay.body, retry.body, `round ${round}: the replay is byte-identical`);

    const after = await db.owner<{ id: string }[]>`select id from ledger_transfers order by id`;
    t.same(
      after.map((r) => r.id),
      transferIds,
      `round ${round}: exactly one transfer for the key`,
    );
    t.same(await balances(db.owner), expected, `round ${round}: the money moved once`);
    const [row] = await db.owner<{ state: string; response_status: number; resource_id: string }[]>`
      select state, response_status, resource_id from idempotency_keys where key = ${key}`;
    t.same(
      row,
      { state: 'completed', response_status: 201, resource_id: made.id },
      `round ${round}: the key row is completed with the answer`,
    );
  }

  t.same(await keysInProgress(db.owner), [], 'no idempotency key row is left in progress');
  await assertLedgerInvariants(t, db.owner, openings);
  t.same(
    await stopProcesses(all.map((x) => x.process)),
    [...Array.from({ length: ROUNDS }, () => null), 0],
    'every killed process died by the signal; the last one drains and exits 0',
  );
});
