/**
 * The client's entry point: `node dist/apps/client/main.js <command> ...`
 * (or `tsx apps/client/main.ts ...` from source); see cli.ts for the
 * commands and README.md beside this file for the guarantees. SIGINT and
 * SIGTERM stop a drain between attempts: intents stay pending, exit 130.
 */
import { silenceSqliteExperimentalWarning } from './warnings.js';
import { EXIT, runCli } from './cli.js';

// Before the first outbox is opened, which loads node:sqlite.
silenceSqliteExperimentalWarning();

const stop = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    stop.abort();
  });
}
// A write to standard output that fails (a closed pipe, a full disk) emits
// an error event; unheard, it would crash the process with exit 1, which
// reads as "refused by the server". The command learns of a failed result
// write through its callback; any other is exit 74 here.
let outputError: Error | undefined;
process.stdout.on('error', (err: Error) => {
  outputError ??= err;
});
const code = await runCli(process.argv.slice(2), process.env, process, stop.signal);
// A failed write reports its error on a later tick.
await new Promise((resolve) => setImmediate(resolve));
if (outputError !== undefined && code !== EXIT.output) {
  process.stderr.write(
    `client: standard output could not be written (${outputError.message}): what this command printed was not seen\n`,
  );
}
process.exitCode = outputError === undefined ? code : EXIT.output;
