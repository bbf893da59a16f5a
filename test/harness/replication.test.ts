/**
 * The two-cluster setup of the failover test: a PostgreSQL 18 primary and a
 * streaming standby made by a file copy of the primary's data folder, with
 * synchronous replication. Real clusters from the embedded binaries.
 */
import { execFileSync } from 'node:child_process';
import t from 'tap';
import type { Test } from 'tap';
import { createSql, type Sql } from '../../platform/pg/client.js';
import { startReplicatedPair, type ReplicatedPair } from './replication.js';

/** Polls until a condition holds; the deadline only keeps a broken run from hanging. */
async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  const until = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function pools(t: Test): (url: string) => Sql {
  const opened: Sql[] = [];
  t.teardown(() => Promise.all(opened.map((s) => s.end({ timeout: 1 }).catch(() => undefined))));
  return (url) => {
    const sql = createSql(url, { max: 1, applicationName: 'test-replication' });
    opened.push(sql);
    return sql;
  };
}

async function rows(sql: Sql): Promise<number[]> {
  return (await sql<{ n: number }[]>`select n from probe order by n`).map((r) => r.n);
}

void t.test('a primary with a synchronous standby made by a file copy', async (t) => {
  const pair: ReplicatedPair = await startReplicatedPair();
  t.teardown(() => pair.close());
  const open = pools(t);
  const [a, b] = pair.nodes;
  t.equal(pair.primary(), a, 'the first node is the primary');
  t.equal(pair.standby(), b, 'the second node is its standby');
  t.not(a.port, b.port);

  t.same(
    await pair.replication(),
    [{ application_name: b.name, state: 'streaming', sync_state: 'sync' }],
    'the standby streams from the primary and is its synchronous standby',
  );

  const onA = open(pair.adminUrl(a));
  const onB = open(pair.adminUrl(b));
  t.same(
    (await onB<{ r: boolean }[]>`select pg_is_in_recovery() as r`).map((r) => r.r),
    [true],
    'the standby is in recovery',
  );
  await onA`create table probe (n int primary key)`;
  await onA`insert into probe values (1)`;
  await eventually('the row is replayed on the standby', async () => {
    const seen = await onB<{ n: number }[]>`select n from probe`.catch(() => []);
    return seen.length === 1;
  });
  await t.rejects(onB`insert into probe values (2)`, /read-only/, 'the standby refuses writes');

  // Synchronous: with the standby down, a commit on the primary waits for it.
  await pair.stopStandby();
  const waiting = onA`insert into probe values (2)`.then(() => 'committed');
  await eventually('the commit waits for the synchronous standby', async () => {
    const watch = open(pair.adminUrl(a));
    const found = await watch`
      select 1 from pg_stat_activity where wait_event = 'SyncRep'`;
    await watch.end();
    return found.length > 0;
  });
  await pair.startStandby();
  t.equal(await waiting, 'committed', 'the commit returns once the standby is back');
  t.same(
    await pair.replication(),
    [{ application_name: b.name, state: 'streaming', sync_state: 'sync' }],
    'the restarted standby is synchronous again',
  );

  // An acknowledged commit survives the immediate stop of the primary.
  await onA`insert into probe values (3)`;
  await pair.stopPrimary();
  t.equal(pair.standby(), b, 'until the promotion the survivor is still the standby');
  await pair.promoteStandby();
  t.equal(pair.primary(), b, 'the promoted standby is the primary');
  t.equal(pair.standby(), undefined, 'and it has no standby yet');
  t.same(await rows(onB), [1, 2, 3], 'every acknowledged commit is on the promoted standby');
  t.same(
    (await onB<{ r: boolean }[]>`select pg_is_in_recovery() as r`).map((r) => r.r),
    [false],
    'the promoted node is out of recovery',
  );
  await onB`insert into probe values (4)`;
  t.same(await pair.replication(), [], 'the new primary runs alone');

  // The old primary is rebuilt as a standby of the new one by the same copy.
  await pair.rebuildStandby();
  t.equal(pair.standby(), a, 'the old primary is the standby now');
  t.same(
    await pair.replication(),
    [{ application_name: a.name, state: 'streaming', sync_state: 'sync' }],
    'it streams from the new primary and is synchronous',
  );
  await onB`insert into probe values (5)`;

  // And back.
  await pair.stopPrimary();
  await pair.promoteStandby();
  t.equal(pair.primary(), a, 'a second failover promotes the first node again');
  const onA2 = open(pair.adminUrl(a));
  t.same(await rows(onA2), [1, 2, 3, 4, 5], 'nothing acknowledged was lost in two failovers');
});

void t.test('promoting without a stopped primary is refused', async (t) => {
  const pair = await startReplicatedPair();
  t.teardown(() => pair.close());
  await t.rejects(pair.promoteStandby(), /still running/);
  await t.rejects(pair.rebuildStandby(), /already has a standby/);
  await pair.stopPrimary();
  await t.rejects(pair.stopPrimary(), /no running primary/);
  await t.rejects(pair.rebuildStandby(), /no running primary/);
  await pair.close();
  await pair.close();
  t.pass('close is safe to call twice');
});

void t.test(
  'once the standby is the synchronous one, commits wait for it, even with a checkpointer slow to read the setting',
  async (t) => {
    const pair = await startReplicatedPair();
    t.teardown(() => pair.close());
    const open = pools(t);
    const [a] = pair.nodes;
    const onA = open(pair.adminUrl(a));
    await onA`create table probe (n int primary key)`;
    // A primary without a synchronous standby, its checkpointer up to date.
    await pair.stopStandby();
    await onA.unsafe('alter system reset synchronous_standby_names');
    await onA`select pg_reload_conf()`;
    await onA`checkpoint`;
    // The checkpointer is the process that makes commits wait for a
    // standby named in synchronous_standby_names; pg_stat_replication
    // already says sync once the walsender has read the name. Paused, it
    // stands for one busy with a checkpoint; it resumes after 2 s at most.
    const [checkpointer] = await onA<{ pid: number }[]>`
      select pid from pg_stat_activity where backend_type = 'checkpointer'`;
    const pid = String(checkpointer?.pid);
    execFileSync('kill', ['-STOP', pid]);
    let paused = true;
    const resume = (): void => {
      if (paused) execFileSync('kill', ['-CONT', pid]);
      paused = false;
    };
    t.teardown(resume);
    const timer = setTimeout(resume, 2_000);
    await pair.startStandby();
    // Still paused here means startStandby returned on the walsender's word.
    await pair.stopStandby();
    const outcome = await Promise.race([
      onA`insert into probe values (1)`.then(() => 'committed without the standby'),
      new Promise((resolve) => {
        setTimeout(() => {
          resolve('waiting for the standby');
        }, 1_000);
      }),
    ]);
    clearTimeout(timer);
    resume();
    t.equal(outcome, 'waiting for the standby', 'a commit waits for the synchronous standby');
    await pair.startStandby();
    t.same(await rows(onA), [1], 'and commits once it is back');
  },
);
