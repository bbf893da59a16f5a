/**
 * The client's command line: `transfer`, `accounts create`, `outbox list`
 * and `outbox drain`, with settings from flags or environment variables
 * (a flag wins). `parseCommandLine` (cli-args.ts) turns arguments into a
 * command and refuses bad ones in one line naming the flag or variable;
 * `runCli` runs a command over {@link LedgerClient}, which holds the rules,
 * prints its result and returns its exit status (see {@link EXIT}). Results
 * go to standard output (one JSON document with `--json`), progress to
 * standard error (JSON lines with `--json`).
 */
import { parseCommandLine } from './cli-args.js';
import {
  EXIT,
  USAGE,
  UsageError,
  type Command,
  type Environment,
  type SendSettings,
} from './cli-command.js';
import {
  checkAdvice,
  eventJson,
  intentJson,
  listLine,
  outcome,
  printable,
  progressLine,
  resultLine,
} from './cli-output.js';
import {
  EqualIntentError,
  mayHaveTakenEffect,
  unknownOutcomeText,
  LedgerClient,
  accountIntent,
  intentVerdict,
  transferIntent,
} from './client.js';
import { IntentConflictError, Outbox, OutboxError, type Intent } from './outbox.js';
import type { DrainReport, SenderOptions, StopReason } from './sender.js';

export { parseCommandLine, parseDuration } from './cli-args.js';
export * from './cli-command.js';

/** Where a command writes. */
export interface Output {
  /**
   * Standard output. `write` calls its callback once the text has left
   * (with an error when it could not), as a Node.js stream does: a result
   * is marked reported only then, since a write to a pipe completes later
   * and a kill before it loses the text.
   */
  readonly stdout: { write(text: string, done?: (err?: Error | null) => void): unknown };
  /** Standard error, for progress and messages. */
  readonly stderr: { write(text: string): unknown };
}

/**
 * Writes to standard output and waits until the text has left.
 *
 * @returns the write's error, or undefined when it was written.
 */
function written(out: Output, text: string): Promise<Error | undefined> {
  return new Promise((resolve) => {
    out.stdout.write(text, (err) => {
      resolve(err ?? undefined);
    });
  });
}

function stopExit(stoppedBy: StopReason): number {
  switch (stoppedBy) {
    case 'unauthenticated':
      return EXIT.unauthenticated;
    case 'unexpected_answer':
    case 'clock_disagreement':
    case 'key_lifetime_too_short':
      return EXIT.failed;
    case 'aborted':
      return EXIT.interrupted;
    default:
      return EXIT.pending;
  }
}

function intentExit(intent: Intent, stoppedBy: StopReason | undefined): number {
  switch (intentVerdict(intent)) {
    case 'pending':
      return stopExit(stoppedBy ?? 'deadline');
    case 'ok':
      return EXIT.ok;
    case 'rejected':
      return EXIT.rejected;
    case 'failed':
      return EXIT.failed;
  }
}

function senderOptions(s: SendSettings, out: Output): Omit<SenderOptions, 'outbox'> {
  return {
    baseUrl: s.baseUrl,
    token: s.token,
    ...(s.keyTtlMs === undefined ? {} : { keyTtlMs: s.keyTtlMs }),
    ttlMarginMs: s.ttlMarginMs,
    timeoutMs: s.timeoutMs,
    concurrency: s.concurrency,
    backoff: { baseMs: s.retryBaseMs, capMs: s.retryCapMs, maxRetryAfterMs: 10 * 60_000 },
    onEvent: (event) => {
      // A halt is the command's final line on standard error (one line per
      // error), not a progress line as well.
      if (!s.json && event.type === 'halted') return;
      out.stderr.write(
        s.json ? `${JSON.stringify(eventJson(event))}\n` : `${progressLine(event)}\n`,
      );
    },
    onWarning: warning(s.json, out),
  };
}

/** Writes a warning as one line on standard error, JSON with `--json`. */
function warning(json: boolean, out: Output): (detail: string) => void {
  return (detail) => {
    out.stderr.write(
      json
        ? `${JSON.stringify({ event: 'warning', detail })}\n`
        : `client: warning: ${printable(detail)}\n`,
    );
  };
}

/**
 * Runs a command line.
 *
 * @param argv the arguments after the program's name.
 * @param env the environment, for the `CLIENT_*` variables.
 * @param out where results and progress go.
 * @param signal aborts a drain (SIGINT, SIGTERM); intents stay pending.
 * @returns the exit status, one of {@link EXIT}.
 */
export async function runCli(
  argv: readonly string[],
  env: Environment,
  out: Output,
  signal?: AbortSignal,
): Promise<number> {
  let command: Command;
  try {
    command = parseCommandLine(argv, env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    out.stderr.write(`client: ${err.message}; see client --help\n`);
    return EXIT.usage;
  }
  if (command.kind === 'help') {
    out.stdout.write(`${USAGE}\n`);
    return EXIT.ok;
  }
  try {
    return await run(command, out, signal);
  } catch (err) {
    // Their messages can hold a server's words (a principal id, a path).
    if (err instanceof IntentConflictError) {
      out.stderr.write(`client: ${printable(err.message)}\n`);
      return EXIT.failed;
    }
    if (err instanceof OutboxError) {
      out.stderr.write(`client: ${printable(err.message)}\n`);
      return EXIT.outbox;
    }
    out.stderr.write(
      `client: a bug: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    return EXIT.bug;
  }
}

async function run(
  command: Exclude<Command, { kind: 'help' }>,
  out: Output,
  signal: AbortSignal | undefined,
): Promise<number> {
  if (command.kind === 'outbox-list') return list(command, out);
  const s = command.settings;
  const client = LedgerClient.open({ file: s.outbox, ...senderOptions(s, out) });
  try {
    const deadline = Date.now() + s.waitMs;
    const drainOptions = signal === undefined ? { deadline } : { deadline, signal };
    if (command.kind === 'outbox-drain') {
      // With nothing pending too: a wrong URL or token shows now, not at
      // the next write.
      const report = await client.drain({ ...drainOptions, checkWhenEmpty: true });
      return drainResult(report, s, out);
    }
    const wanted =
      command.kind === 'transfer'
        ? transferIntent(
            { from_account_id: command.from, to_account_id: command.to, amount: command.amount },
            {
              independent: command.independent,
              ...(command.key === undefined ? {} : { key: command.key }),
            },
          )
        : accountIntent(
            { name: command.name, opening_balance: command.openingBalance },
            command.key === undefined ? {} : { key: command.key },
          );
    // The same command run again after it was left pending (exit 75, 5,
    // 130, a kill), or after its answer was recorded but never printed,
    // would state a second intent under a new key and move the money
    // twice: the library refuses it (EqualIntentError) unless --key names
    // the intent or --again says a second one is meant.
    let stated: { intent: Intent; created: boolean };
    try {
      stated = client.state(wanted, { again: command.again });
    } catch (err) {
      if (!(err instanceof EqualIntentError)) throw err;
      out.stderr.write(`client: ${equalMessage(err.intent)}\n`);
      return EXIT.failed;
    }
    if (s.json) {
      out.stderr.write(
        `${JSON.stringify({ event: 'stated', created: stated.created, intent: intentJson(stated.intent) })}\n`,
      );
    } else if (stated.created) {
      out.stderr.write(`stated ${stated.intent.operation} ${stated.intent.key}\n`);
    }
    const { intent, report } = await client.settle(stated.intent, drainOptions);
    const code = intentExit(intent, report?.stoppedBy);
    const text = s.json
      ? `${JSON.stringify({
          command: command.kind === 'transfer' ? 'transfer' : 'accounts create',
          exit_code: code,
          created: stated.created,
          stopped_by: report?.stoppedBy ?? null,
          halt: report?.halt ?? null,
          pending: client.outbox.pendingCount(),
          intent: intentJson(intent),
          settled: (report?.settled ?? []).filter((i) => i.key !== intent.key).map(intentJson),
        })}\n`
      : `${resultLine(intent, !stated.created, report?.unreached)}\n`;
    // Marked reported once the text has left, not when the write was
    // called: a kill before the bytes leave a pipe leaves it unreported.
    const error = await written(out, text);
    if (!s.json && report?.halt !== undefined)
      out.stderr.write(`client: ${printable(report.halt)}\n`);
    if (error !== undefined) {
      out.stderr.write(
        `client: the result of ${intent.key} could not be written to standard output (${error.message}): it is not marked reported\n`,
      );
      return EXIT.output;
    }
    client.report(intent);
    return code;
  } finally {
    client.close();
  }
}

/**
 * The refusal of an intent equal to one never reported, in the words of
 * the command line: what to run instead.
 */
function equalMessage(equal: Intent): string {
  if (equal.state === 'pending') {
    return `a ${equal.operation} equal to this one is pending under key ${equal.key}: run "client outbox drain" to deliver it (or repeat with --key ${equal.key}); --again states a second one`;
  }
  if (mayHaveTakenEffect(equal)) {
    // The money may have moved: the way on is a check, not a second one.
    // An expired key with no attempt counted here may have been sent all
    // the same (a key given with --key, a restored outbox).
    const why = `its outcome is unknown (${unknownOutcomeText(equal)})`;
    return `a ${equal.operation} equal to this one was stated under key ${equal.key} and ${why}, its result never printed: an attempt may have taken effect, so do not state it again: ${checkAdvice(equal)}; the same command with --key ${equal.key} prints what it met, sending nothing; only once the check shows it did not take effect, --again states a new one`;
  }
  // Settled by a drain, a library caller or a command killed before it
  // printed: its answer is not this command's to print, nor its exit 0.
  const failure = equal.failure === null ? '' : ` (${equal.failure})`;
  return `a ${equal.operation} equal to this one was stated under key ${equal.key} and is ${equal.state}${failure}, but its result was never printed: the same command with --key ${equal.key} prints its answer, sending nothing; --again states a second one`;
}

function list(command: Extract<Command, { kind: 'outbox-list' }>, out: Output): number {
  const { settings } = command;
  // A listing reads an outbox; it never makes one (a mistyped path would
  // list a new, empty outbox and leave the file behind).
  const outbox = Outbox.open(settings.outbox, {
    create: false,
    onWarning: warning(settings.json, out),
  });
  try {
    // A listing reads every row; the check reads every page, indexes
    // included, so it finds the damage a drain would meet in them.
    outbox.check();
    const intents = outbox.list(command.state === undefined ? {} : { state: command.state });
    if (settings.json) {
      out.stdout.write(
        `${JSON.stringify({
          command: 'outbox list',
          outbox: outbox.file,
          principal_id: outbox.principal() ?? null,
          intents: intents.map(intentJson),
        })}\n`,
      );
    } else if (intents.length === 0) {
      out.stdout.write(
        command.state === undefined
          ? 'the outbox is empty\n'
          : `no ${command.state} intent in the outbox\n`,
      );
    } else {
      for (const intent of intents) out.stdout.write(`${listLine(intent)}\n`);
    }
    return EXIT.ok;
  } finally {
    outbox.close();
  }
}

function drainResult(report: DrainReport, s: SendSettings, out: Output): number {
  let code: number = EXIT.ok;
  if (report.stoppedBy !== 'empty') code = stopExit(report.stoppedBy);
  else if (report.settled.some((i) => i.state === 'failed')) code = EXIT.failed;
  // A marked refusal leaves the intent done, and the drain must not exit 0
  // for it: `client outbox drain && echo paid` would take it as paid.
  else if (report.settled.some((i) => intentVerdict(i) === 'rejected')) code = EXIT.rejected;
  if (s.json) {
    out.stdout.write(
      `${JSON.stringify({
        command: 'outbox drain',
        exit_code: code,
        stopped_by: report.stoppedBy,
        halt: report.halt ?? null,
        pending: report.pending,
        settled: report.settled.map(intentJson),
      })}\n`,
    );
    return code;
  }
  if (report.stoppedBy === 'empty' && report.settled.length === 0) {
    out.stdout.write(`nothing pending in outbox ${s.outbox}\n`);
    return code;
  }
  for (const intent of report.settled) {
    out.stdout.write(
      `${intent.state.padEnd(7)} ${intent.operation} ${intent.key}: ${outcome(intent)}\n`,
    );
  }
  const failed = report.settled.filter((i) => i.state === 'failed').length;
  const refused = report.settled.filter((i) => intentVerdict(i) === 'rejected').length;
  out.stdout.write(
    `${String(report.settled.length)} settled (${String(failed)} failed${refused > 0 ? `, ${String(refused)} refused` : ''}), ${String(report.pending)} pending${report.unreached === undefined ? '' : `: the server was not reached: ${printable(report.unreached)}`}${report.pending > 0 ? `${report.unreached === undefined ? ':' : ';'} "client outbox drain" sends them later with the same keys` : ''}\n`,
  );
  if (report.halt !== undefined) out.stderr.write(`client: ${printable(report.halt)}\n`);
  return code;
}
