/**
 * The token cache across processes: two `api` processes, each caching token
 * lookups for a minute (`identity.token_cache_ttl=60s`, the most allowed, so nothing but the
 * LISTEN/NOTIFY feed can make them forget), on one database.
 *
 * - The cache is really used: a revocation written with triggers off (no
 *   notice) leaves both processes answering the cached token.
 * - A token revoked through the API on one process, and a principal
 *   disabled from a third process, are refused by every api process
 *   within one second of the change's commit.
 * - A token revoked through the API is timed from before the DELETE is
 *   sent, on each process apart: process 1, which did not revoke it, hears
 *   of it only through the notice.
 * - The feed lost (its sessions terminated): until it listens again, and
 *   after, a process answers from the database, so a change it never heard
 *   of is still refused. The test fails if the feed is not back within 10 s,
 *   proves the cache serves again (a revocation without a notice goes
 *   unseen), and then that a notified change is refused.
 */
import t from 'tap';
import { newId } from '../../kernel/ids/index.js';
import type { Id } from '../../kernel/ids/index.js';
import { systemClock } from '../../kernel/clock/index.js';
import { createIdentityModule, createPrincipalWithToken } from '../../modules/identity/index.js';
import { buildApp } from '../../apps/server/app.js';
import { loadConfig } from '../../platform/config/index.js';
import { createLogger } from '../../platform/log/index.js';
import { createSql } from '../../platform/pg/client.js';
import { testDatabase } from '../harness/db.js';
import { testUnitOfWork } from '../harness/uow.js';
import { startServerProcess, type ServerProcess } from '../harness/process.js';
import { stopProcesses } from './processes.js';

/** The bound the feed must keep: a change refused everywhere within this. */
const WITHIN_MS = 1_000;
const APP_NAME = 'revocation-test';

void t.test(
  'a revoked token and a disabled principal are refused by every api process within one second',
  async (t) => {
    const db = await testDatabase(t);
    const { db: pg, uow } = testUnitOfWork(t, db, { sql: db.app });
    const deps = { db: pg, uow, clock: systemClock };
    const admin = createSql(db.adminUrl, { max: 1, applicationName: 'revocation-test-admin' });
    t.teardown(() => admin.end());

    const env = {
      DATABASE__URL: db.appUrl,
      DATABASE__POOL_MAX: '4',
      HTTP__PORT: '0',
      HTTP__RATE_LIMIT_MAX: '100000',
      IDENTITY__TOKEN_CACHE_TTL: '60s',
      APP__NAME: APP_NAME,
      LOG__LEVEL: 'info',
    };
    const processes: ServerProcess[] = [];
    t.teardown(() => stopProcesses(processes));
    for (let i = 0; i < 2; i += 1) processes.push(startServerProcess(['--role', 'api'], env));
    const bases = await Promise.all(
      processes.map(
        async (p) => (await p.waitForLine((l) => l['msg'] === 'listening'))['address'] as string,
      ),
    );

    const me = async (base: string, token: string): Promise<number> =>
      (await fetch(`${base}/api/v1/me`, { headers: { authorization: `Bearer ${token}` } })).status;
    const everywhere = async (token: string): Promise<number[]> =>
      Promise.all(bases.map((b) => me(b, token)));
    /** Polls every process until each refuses the token; the time each took. */
    const refusedWithin = async (token: string, since: number): Promise<number[]> =>
      Promise.all(
        bases.map(async (b) => {
          for (;;) {
            const status = await me(b, token);
            const elapsed = performance.now() - since;
            if (status === 401) return elapsed;
            if (status !== 200) throw new Error(`${b} answered ${String(status)}`);
            if (elapsed > 10 * WITHIN_MS) return elapsed;
            await new Promise((r) => setTimeout(r, 5));
          }
        }),
      );
    const newToken = async (base: string, token: string): Promise<{ id: Id; token: string }> => {
      const res = await fetch(`${base}/api/v1/tokens`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          'idempotency-key': newId(),
        },
        body: '{}',
      });
      t.equal(res.status, 201, 'a token issued');
      return (await res.json()) as { id: Id; token: string };
    };
    /** Revokes with the triggers off: no notice is sent (a superuser's session). */
    const revokeUnheard = (tokenId: Id) =>
      admin.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        await tx`update api_tokens set revoked_at = now() where id = ${tokenId}`;
      });

    const alice = await createPrincipalWithToken(deps, { displayName: 'Alice' });
    const base0 = bases[0] ?? '';
    const base1 = bases[1] ?? '';

    // 1. The cache is used: a revocation nobody is told of goes unseen.
    const quiet = await newToken(base0, alice.token);
    t.same(await everywhere(quiet.token), [200, 200], 'cached on both processes');
    await revokeUnheard(quiet.id);
    t.same(
      await everywhere(quiet.token),
      [200, 200],
      'a revocation without a notice is not seen: the answers come from the cache',
    );

    // 2. Revoked through the API on process 0: refused by both within a second.
    const victim = await newToken(base0, alice.token);
    t.same(await everywhere(victim.token), [200, 200], 'cached on both processes');
    // Timed from before the DELETE is sent: the commit happens during it.
    const revokedAt = performance.now();
    const revoke = await fetch(`${base0}/api/v1/tokens/${victim.id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${alice.token}`, 'idempotency-key': newId() },
    });
    t.equal(revoke.status, 204, 'revoked');
    const [onRevoker = Infinity, onOther = Infinity] = await refusedWithin(victim.token, revokedAt);
    t.ok(
      onRevoker < WITHIN_MS,
      `process 0 (which revoked) refuses within ${String(WITHIN_MS)} ms: ${onRevoker.toFixed(0)} ms`,
    );
    // Process 1 drops nothing of its own accord: only the notice tells it.
    t.ok(
      onOther < WITHIN_MS,
      `process 1 (told only by the notice) refuses within ${String(WITHIN_MS)} ms: ${onOther.toFixed(0)} ms`,
    );
    t.comment(
      `revocation refused after ${onRevoker.toFixed(1)} ms on process 0 and ${onOther.toFixed(1)} ms on process 1, from before the DELETE`,
    );

    // 3. A principal disabled from a third process (the admin CLI's path).
    const bob = await createPrincipalWithToken(deps, { displayName: 'Bob' });
    t.same(await everywhere(bob.token), [200, 200], "bob's token cached on both");
    await createIdentityModule(deps).disablePrincipal(bob.principalId);
    const disableTimes = await refusedWithin(bob.token, performance.now());
    t.ok(
      disableTimes.every((ms) => ms < WITHIN_MS),
      `the disabled principal refused by both within ${String(WITHIN_MS)} ms: ${disableTimes.map((ms) => ms.toFixed(0)).join(', ')} ms`,
    );

    // 4. The feed lost: the processes read the database until it is back, and
    // drop their caches when it is, so a change made meanwhile is not missed.
    const carol = await newToken(base1, alice.token);
    t.same(await everywhere(carol.token), [200, 200], "carol's token cached on both");
    const losses = processes.map((p) => p.lines.length);
    const killed = await admin<{ ok: boolean }[]>`
    select pg_terminate_backend(pid) as ok from pg_stat_activity
     where application_name = ${`${APP_NAME}-credentials`}`;
    t.same(
      killed.map((k) => k.ok),
      [true, true],
      'one listening session per process, both terminated',
    );
    await Promise.all(
      processes.map((p, i) =>
        p.waitForLine(
          (l) =>
            p.lines.indexOf(l) >= (losses[i] ?? 0) &&
            typeof l['msg'] === 'string' &&
            l['msg'].startsWith('token cache off'),
        ),
      ),
    );
    await revokeUnheard(carol.id);
    t.same(
      await everywhere(carol.token),
      [401, 401],
      'a revocation made while the feed was down is refused (not served from the cache)',
    );
    // The feed comes back; the cache serves again, and hears again.
    const back = performance.now() + 10_000;
    for (;;) {
      const rows = await admin<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
       where application_name = ${`${APP_NAME}-credentials`} and query ilike 'listen%'`;
      if (rows[0]?.n === 2) break;
      if (performance.now() > back) {
        throw new Error(`the listeners did not LISTEN again within 10 s: ${String(rows[0]?.n)}`);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    // Listening is not yet live (a heartbeat must be heard first): the cache
    // is proven to serve again when a revocation without a notice goes unseen.
    for (let tries = 1; ; tries += 1) {
      const probe = await newToken(base0, alice.token);
      t.same(await everywhere(probe.token), [200, 200], 'the probe token usable');
      await revokeUnheard(probe.id);
      const seen = await everywhere(probe.token);
      if (seen.every((s) => s === 200)) {
        t.pass(`the cache serves again on both processes (probe ${String(tries)})`);
        break;
      }
      if (performance.now() > back) {
        throw new Error(`the cache did not serve again within 10 s: ${seen.join(', ')}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const dave = await newToken(base0, alice.token);
    t.same(await everywhere(dave.token), [200, 200]);
    const backAt = performance.now();
    await createIdentityModule(deps).disablePrincipal(alice.principalId);
    const backTimes = await refusedWithin(dave.token, backAt);
    t.ok(
      backTimes.every((ms) => ms < WITHIN_MS),
      `after the feed is back, a change reaches both within ${String(WITHIN_MS)} ms: ${backTimes.map((ms) => ms.toFixed(0)).join(', ')} ms`,
    );
  },
);

void t.test(
  'a server that fails to build does not leave its credential listener behind',
  async (t) => {
    const db = await testDatabase(t);
    const name = 'revocation-build-fails';
    const config = loadConfig({
      env: { DATABASE__URL: db.appUrl, APP__NAME: name, IDENTITY__TOKEN_CACHE_TTL: '5s' },
    });
    await t.rejects(
      buildApp({
        config,
        appUrl: db.appUrl,
        logger: createLogger({ appName: name, level: 'silent' }),
        extraModules: () => {
          throw new Error('a module failed to build');
        },
      }),
      /a module failed to build/,
    );
    const left = await db.owner<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where application_name like ${`${name}-credentials%`}`;
    t.equal(left[0]?.n, 0, 'the listener and its heartbeat sessions are closed');
  },
);
