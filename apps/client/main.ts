/**
 * The client's entry point: `node dist/apps/client/main.js <command> ...`
 * (or `tsx apps/client/main.ts ...` from source); see cli.ts for the
 * commands and README.md beside this file for the guarantees. SIGINT and
 * SIGTERM stop a drain between attempts: intents stay pending, exit 130.
 */
import { silenceSqliteExperimentalWarning } from './warnings.js';
import { runCli } from './cli.js';

// Before the first outbox is opened, which loads node:sqlite.
silenceSqliteExperimentalWarning();

const stop = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    stop.abort();
  });
}
process.exitCode = await runCli(process.argv.slice(2), process.env, process, stop.signal);
