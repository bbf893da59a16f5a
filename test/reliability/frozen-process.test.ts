/**
 * A process frozen (SIGSTOP) with a transaction open leaves no session
 * behind: the application's sessions start with the unit of work's
 * timeouts as their own defaults, so PostgreSQL ends the transaction and
 * the session by itself, whatever the process does (here: nothing at all).
 * The wait below detects a session that stays; it measures no speed.
 */
import t from 'tap';
import { testDatabase } from '../harness/db.js';
import { startScriptProcess } from '../harness/process.js';

const TIMEOUT_MS = 1000;

void t.test('a frozen process with a transaction open: PostgreSQL ends its session', async (t) => {
  const tdb = await testDatabase(t);
  const child = startScriptProcess('test/fixtures/pg/frozen-transaction.ts', [], {
    DATABASE_URL: tdb.appUrl,
    TRANSACTION_TIMEOUT_MS: String(TIMEOUT_MS),
  });
  t.teardown(() => {
    child.child.kill('SIGKILL');
  });
  const ready = await child.waitForLine((l) => l['msg'] === 'ready');
  const pid = ready['pid'];
  t.type(pid, 'number', 'the child reports its session');
  child.child.kill('SIGSTOP');
  // As the same role as the child: only it (or a superuser) sees the state.
  const session = () =>
    tdb.app<{ state: string }[]>`select state from pg_stat_activity where pid = ${pid as number}`;
  t.match(await session(), [{ state: 'idle in transaction' }], 'frozen in its transaction');
  const deadline = performance.now() + TIMEOUT_MS + 4000;
  let left = await session();
  while (left.length > 0 && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    left = await session();
  }
  t.same(left, [], 'the server ended the session of the frozen process');
  child.child.kill('SIGCONT');
});
