/**
 * The client's command line: `transfer`, `accounts create`, `outbox list`
 * and `outbox drain`, with settings from flags or environment variables
 * (a flag wins). `parseCommandLine` turns arguments into a command and
 * refuses bad ones in one line naming the flag or variable; `runCli` runs a
 * command and returns its exit status (see {@link EXIT}). Results go to
 * standard output (one JSON document with `--json`), progress to standard
 * error (JSON lines with `--json`).
 */
import { parseArgs } from 'node:util';
import {
  EqualIntentError,
  LedgerClient,
  accountIntent,
  intentVerdict,
  transferIntent,
} from './client.js';
import {
  IntentConflictError,
  Outbox,
  OutboxError,
  checkKey,
  type Intent,
  type IntentState,
} from './outbox.js';
import type { DrainReport, SenderOptions, StopReason } from './sender.js';
import {
  eventJson,
  intentJson,
  listLine,
  outcome,
  progressLine,
  resultLine,
} from './cli-output.js';

/** Exit statuses. */
export const EXIT = {
  /** Done: the command's intent got a 2xx; for a drain, everything got a final answer. */
  ok: 0,
  /**
   * The server's final answer to the command's intent is an error: a
   * stored 4xx marked with `Idempotent-Replay` (an unmarked one is never
   * taken for the server's refusal).
   */
  rejected: 1,
  /** A bad flag or environment variable. */
  usage: 2,
  /**
   * An intent failed: key reuse (422), an expired key, an unexpected answer,
   * an unknown outcome (a 2xx or a stored status without
   * `Idempotent-Replay` twice in a row, or an answer the API never gives
   * after an attempt that may have reached the server); or a key given
   * twice; or a drain
   * halted because a server `Date` and the local clock disagree (intents
   * with an attempt behind them stay pending until the clock is fixed).
   */
  failed: 3,
  /**
   * The outbox cannot be used: locked by another process, unreadable,
   * corrupt, damaged (any error of SQLite once it is open: a malformed
   * page, an I/O error, a full disk), another principal's.
   */
  outbox: 4,
  /** The server refused the token (401): intents stay pending for a good one. */
  unauthenticated: 5,
  /** A bug in the client (the message has the stack). */
  bug: 70,
  /**
   * Standard output could not be written (a closed pipe, a full disk): the
   * result was not seen. The command's intent is not marked reported, so
   * the same command again prints it instead of stating a second one.
   */
  output: 74,
  /** Still pending when `--wait` ran out: a later command or `outbox drain` sends it. */
  pending: 75,
  /** Interrupted by SIGINT or SIGTERM: intents stay pending. */
  interrupted: 130,
} as const;

/** The usage text, printed by `--help`. */
export const USAGE = `Usage:
  client transfer --from ID --to ID --amount N [--key UUIDv7] [--independent] [--again]
  client accounts create --name NAME [--opening-balance N] [--key UUIDv7] [--again]
  client outbox list [--state pending|done|failed]
  client outbox drain
  client --help

Every command (flag, or environment variable):
  --outbox FILE          CLIENT_OUTBOX       the outbox file (required; created when missing, but
                                             never by outbox list)
  --json                                     results as one JSON document, progress as JSON lines
A transfer or account creation equal to one still pending is refused (exit 3): deliver
that one with "client outbox drain" (or --key KEY); one equal to an intent settled but whose
result was never printed (its command was killed, or a drain settled it) is refused too
(exit 3): the same command with --key KEY prints its answer; --again states a second one.
Commands that send (transfer, accounts create, outbox drain):
  --base-url URL         CLIENT_BASE_URL     the server's origin, e.g. http://127.0.0.1:3000 (required)
  --token TOKEN          CLIENT_TOKEN        the bearer token (required; prefer the variable)
  --key-ttl DURATION     CLIENT_KEY_TTL      how long the server keeps keys; default what the server tells
                                             (Idempotency-Key-Lifetime), else 24h; the shorter of the two is used
  --ttl-margin DURATION  CLIENT_TTL_MARGIN   a key this much younger than the TTL is no longer sent, default 1h
  --timeout DURATION     CLIENT_TIMEOUT      one attempt's limit, default 30s
  --wait DURATION        CLIENT_WAIT         how long to keep repeating before leaving intents pending, default 30s
  --retry-base DURATION  CLIENT_RETRY_BASE   the first backoff step, default 200ms
  --retry-cap DURATION   CLIENT_RETRY_CAP    the largest backoff step, default 30s
  --concurrency N        CLIENT_CONCURRENCY  intents of different lanes in flight at once, default 4
Durations: an integer and ms, s, m, h or d (0 alone is zero).
Exit: 0 done, 1 refused by the server (a marked refusal), 2 usage, 3 failed (key reuse,
      expired, unexpected, outcome unknown, the server's clock and this one disagree),
      4 outbox unusable, 5 token refused, 75 still pending, 130 interrupted, 70 bug.`;

/** A command line the client cannot run; the message is one line naming the flag or variable. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Settings of every command. */
export interface CommonSettings {
  /** The outbox file. */
  readonly outbox: string;
  /** JSON output. */
  readonly json: boolean;
}

/** Settings of the commands that send. */
export interface SendSettings extends CommonSettings {
  readonly baseUrl: string;
  readonly token: string;
  /**
   * The key lifetime given (`--key-ttl`), an override of the server's
   * `Idempotency-Key-Lifetime`; undefined: the server's.
   */
  readonly keyTtlMs: number | undefined;
  readonly ttlMarginMs: number;
  readonly timeoutMs: number;
  readonly waitMs: number;
  readonly retryBaseMs: number;
  readonly retryCapMs: number;
  readonly concurrency: number;
}

/** A parsed command line. */
export type Command =
  | { readonly kind: 'help' }
  | {
      readonly kind: 'transfer';
      readonly settings: SendSettings;
      readonly from: string;
      readonly to: string;
      readonly amount: number;
      readonly key: string | undefined;
      readonly independent: boolean;
      /** State a new intent even when an equal one is pending or unreported. */
      readonly again: boolean;
    }
  | {
      readonly kind: 'accounts-create';
      readonly settings: SendSettings;
      readonly name: string;
      readonly openingBalance: number;
      readonly key: string | undefined;
      /** State a new intent even when an equal one is pending or unreported. */
      readonly again: boolean;
    }
  | {
      readonly kind: 'outbox-list';
      readonly settings: CommonSettings;
      readonly state: IntentState | undefined;
    }
  | { readonly kind: 'outbox-drain'; readonly settings: SendSettings };

/** The environment the command line reads (`process.env` in the entry point). */
export type Environment = Readonly<Record<string, string | undefined>>;

const OPTIONS = {
  outbox: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  'base-url': { type: 'string' },
  token: { type: 'string' },
  'key-ttl': { type: 'string' },
  'ttl-margin': { type: 'string' },
  timeout: { type: 'string' },
  wait: { type: 'string' },
  'retry-base': { type: 'string' },
  'retry-cap': { type: 'string' },
  concurrency: { type: 'string' },
  from: { type: 'string' },
  to: { type: 'string' },
  amount: { type: 'string' },
  key: { type: 'string' },
  independent: { type: 'boolean' },
  again: { type: 'boolean' },
  name: { type: 'string' },
  'opening-balance': { type: 'string' },
  state: { type: 'string' },
} as const;

type Flag = keyof typeof OPTIONS;
type Values = Partial<Record<Flag, string | boolean>>;

const COMMON: readonly Flag[] = ['outbox', 'json', 'help'];
/** The longest duration given to a timer: 24 days, below Node.js's 2^31 - 1 ms. */
const TIMER_MAX_MS = 24 * 86_400_000;
const SENDING: readonly Flag[] = [
  'base-url',
  'token',
  'key-ttl',
  'ttl-margin',
  'timeout',
  'wait',
  'retry-base',
  'retry-cap',
  'concurrency',
];
const FLAGS: Record<Exclude<Command['kind'], 'help'>, readonly Flag[]> = {
  transfer: [...COMMON, ...SENDING, 'from', 'to', 'amount', 'key', 'independent', 'again'],
  'accounts-create': [...COMMON, ...SENDING, 'name', 'opening-balance', 'key', 'again'],
  'outbox-list': [...COMMON, 'state'],
  'outbox-drain': [...COMMON, ...SENDING],
};
const NAMES: Record<Exclude<Command['kind'], 'help'>, string> = {
  transfer: 'transfer',
  'accounts-create': 'accounts create',
  'outbox-list': 'outbox list',
  'outbox-drain': 'outbox drain',
};
const ENV: Partial<Record<Flag, string>> = {
  outbox: 'CLIENT_OUTBOX',
  'base-url': 'CLIENT_BASE_URL',
  token: 'CLIENT_TOKEN',
  'key-ttl': 'CLIENT_KEY_TTL',
  'ttl-margin': 'CLIENT_TTL_MARGIN',
  timeout: 'CLIENT_TIMEOUT',
  wait: 'CLIENT_WAIT',
  'retry-base': 'CLIENT_RETRY_BASE',
  'retry-cap': 'CLIENT_RETRY_CAP',
  concurrency: 'CLIENT_CONCURRENCY',
};
const DEFAULTS: Partial<Record<Flag, string>> = {
  'ttl-margin': '1h',
  timeout: '30s',
  wait: '30s',
  'retry-base': '200ms',
  'retry-cap': '30s',
  concurrency: '4',
};

const MAX_MINOR_UNITS = Number.MAX_SAFE_INTEGER;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const CONTROL = /\p{Cc}/u;

/**
 * Reads a duration: an integer followed by ms, s, m, h or d; `0` alone is zero.
 *
 * @param text the text.
 * @returns milliseconds, or undefined when it is no duration.
 */
export function parseDuration(text: string): number | undefined {
  if (text === '0') return 0;
  const m = DURATION.exec(text);
  if (m === null) return undefined;
  const ms = Number(m[1]) * (UNIT_MS[m[2] ?? ''] ?? 0);
  return Number.isSafeInteger(ms) ? ms : undefined;
}

/** A setting's value and where it came from, for messages. */
interface Source {
  readonly text: string;
  /** `--flag`, the variable's name, or `--flag (default)`. */
  readonly name: string;
}

function parseInteger(text: string, min: number, max: number): number | undefined {
  if (!/^\d+$/.test(text)) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) && n >= min && n <= max ? n : undefined;
}

/**
 * Parses the arguments after the program's name.
 *
 * @param argv e.g. `process.argv.slice(2)`.
 * @param env the environment, for the `CLIENT_*` variables.
 * @returns the command.
 * @throws UsageError in one line naming the bad flag, variable or command.
 */
export function parseCommandLine(argv: readonly string[], env: Environment): Command {
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, strict: true, allowPositionals: true });
  } catch (err) {
    throw new UsageError(parseArgsMessage(err));
  }
  const { values, positionals } = parsed;
  if (values.help === true || positionals.length === 0) return { kind: 'help' };
  const kind = commandKind(positionals);
  const name = NAMES[kind];
  for (const flag of Object.keys(values) as Flag[]) {
    if (!FLAGS[kind].includes(flag)) throw new UsageError(`--${flag} does not belong to "${name}"`);
  }
  const source = (flag: Flag): Source | undefined => {
    const given = values[flag];
    if (typeof given === 'string') return { text: given, name: `--${flag}` };
    const variable = ENV[flag];
    const fromEnv = variable === undefined ? undefined : env[variable];
    if (variable !== undefined && fromEnv !== undefined && fromEnv !== '') {
      return { text: fromEnv, name: variable };
    }
    const fallback = DEFAULTS[flag];
    return fallback === undefined ? undefined : { text: fallback, name: `--${flag} (default)` };
  };
  const required = (flag: Flag): Source => {
    const s = source(flag);
    if (s === undefined || s.text === '') {
      const variable = ENV[flag];
      throw new UsageError(
        variable === undefined
          ? `--${flag} is required for "${name}"`
          : `--${flag} or ${variable} is required`,
      );
    }
    return s;
  };
  const outboxFile = required('outbox');
  // node:sqlite reads a name starting with file: as a URI, whose options
  // (nolock=1, mode=memory) would undo the one-writer lock or durability.
  if (/^file:/i.test(outboxFile.text)) {
    throw new UsageError(
      `${outboxFile.name} must be a file path, not a file: URI, got "${outboxFile.text}" (write ./${outboxFile.text} for a file of that name)`,
    );
  }
  const common: CommonSettings = { outbox: outboxFile.text, json: values.json === true };
  if (kind === 'outbox-list') {
    const state = values.state;
    if (state !== undefined && state !== 'pending' && state !== 'done' && state !== 'failed') {
      throw new UsageError(`--state must be one of pending, done, failed, got "${String(state)}"`);
    }
    return { kind, settings: common, state };
  }
  const settings = sendSettings(common, required, source);
  const key = (): string | undefined => {
    const k = values.key;
    if (typeof k !== 'string') return undefined;
    try {
      return checkKey(k);
    } catch {
      throw new UsageError(`--key must be a UUIDv7 in canonical form, got "${k}"`);
    }
  };
  if (kind === 'outbox-drain') return { kind, settings };
  if (kind === 'accounts-create') {
    const accountName = required('name').text;
    if (accountName.length > 100 || accountName.trim() === '' || CONTROL.test(accountName)) {
      throw new UsageError(
        `--name must be 1 to 100 characters, not blank, without control characters, got "${accountName}"`,
      );
    }
    const opening = source('opening-balance')?.text ?? '0';
    const openingBalance = parseInteger(opening, 0, MAX_MINOR_UNITS);
    if (openingBalance === undefined) {
      throw new UsageError(
        `--opening-balance must be an integer from 0 to ${String(MAX_MINOR_UNITS)}, got "${opening}"`,
      );
    }
    return {
      kind,
      settings,
      name: accountName,
      openingBalance,
      key: key(),
      again: values.again === true,
    };
  }
  const account = (flag: 'from' | 'to'): string => {
    const s = required(flag);
    if (!UUID.test(s.text)) throw new UsageError(`--${flag} must be a UUID, got "${s.text}"`);
    return s.text.toLowerCase();
  };
  const from = account('from');
  const to = account('to');
  const amountText = required('amount').text;
  const amount = parseInteger(amountText, 1, MAX_MINOR_UNITS);
  if (amount === undefined) {
    throw new UsageError(
      `--amount must be an integer from 1 to ${String(MAX_MINOR_UNITS)}, got "${amountText}"`,
    );
  }
  return {
    kind,
    settings,
    from,
    to,
    amount,
    key: key(),
    independent: values.independent === true,
    again: values.again === true,
  };
}

function commandKind(positionals: readonly string[]): Exclude<Command['kind'], 'help'> {
  const [first, second, ...rest] = positionals;
  let kind: Exclude<Command['kind'], 'help'> | undefined;
  let used = 1;
  if (first === 'transfer') kind = 'transfer';
  else if (first === 'accounts' && second === 'create') {
    kind = 'accounts-create';
    used = 2;
  } else if (first === 'outbox' && (second === 'list' || second === 'drain')) {
    kind = second === 'list' ? 'outbox-list' : 'outbox-drain';
    used = 2;
  }
  if (kind === undefined) {
    const shown = first === 'accounts' || first === 'outbox' ? [first, second] : [first];
    throw new UsageError(`unknown command "${shown.filter((x) => x !== undefined).join(' ')}"`);
  }
  const extra = positionals.slice(used);
  if (extra.length > 0 || rest.length > 0) {
    throw new UsageError(`unexpected argument "${extra.join(' ')}"`);
  }
  return kind;
}

function parseArgsMessage(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  const text = err instanceof Error ? err.message : String(err);
  const option = /'(-[^' ]+)/.exec(text)?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option !== undefined) {
    return `unknown flag ${option}`;
  }
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option !== undefined) {
    return /ambiguous/.test(text)
      ? `${option}: write a value that starts with "-" as ${option}=VALUE`
      : `${option} needs a value`;
  }
  return text.split('\n')[0] ?? text;
}

function sendSettings(
  common: CommonSettings,
  required: (flag: Flag) => Source,
  source: (flag: Flag) => Source | undefined,
): SendSettings {
  const baseUrl = required('base-url');
  if (!isOrigin(baseUrl.text)) {
    throw new UsageError(
      `${baseUrl.name} must be an http or https origin without path, query or fragment, got "${baseUrl.text}"`,
    );
  }
  const token = required('token').text;
  const duration = (flag: Flag, min: number, timer = false): { ms: number; s: Source } => {
    const s = required(flag);
    const ms = parseDuration(s.text);
    if (ms === undefined) {
      throw new UsageError(`${s.name} must be a duration like 500ms, 30s, 24h, got "${s.text}"`);
    }
    if (ms < min) {
      throw new UsageError(
        `${s.name} must be a duration of at least ${String(min)}ms, got "${s.text}"`,
      );
    }
    // Node.js timers hold at most 2^31 - 1 ms (about 24.8 days); a longer
    // one fires after 1 ms.
    if (timer && ms > TIMER_MAX_MS) {
      throw new UsageError(`${s.name} must be a duration of at most 24d, got "${s.text}"`);
    }
    return { ms, s };
  };
  const ttl = source('key-ttl') === undefined ? undefined : duration('key-ttl', 1);
  const margin = duration('ttl-margin', 0);
  const timeout = duration('timeout', 1, true);
  const retryBase = duration('retry-base', 1, true);
  const retryCap = duration('retry-cap', 1, true);
  const shown = (d: { s: Source }): string => `${d.s.name} (${d.s.text})`;
  if (ttl !== undefined && margin.ms >= ttl.ms) {
    throw new UsageError(`${shown(margin)} must be less than ${shown(ttl)}`);
  }
  if (timeout.ms >= margin.ms) {
    throw new UsageError(
      `${shown(timeout)} must be less than ${shown(margin)}: the last attempt must arrive before the key can expire`,
    );
  }
  if (retryBase.ms > retryCap.ms) {
    throw new UsageError(`${shown(retryBase)} must not exceed ${shown(retryCap)}`);
  }
  const concurrencySource = source('concurrency') ?? { text: '4', name: '--concurrency' };
  const concurrency = parseInteger(concurrencySource.text, 1, 64);
  if (concurrency === undefined) {
    throw new UsageError(
      `${concurrencySource.name} must be an integer from 1 to 64, got "${concurrencySource.text}"`,
    );
  }
  return {
    ...common,
    baseUrl: baseUrl.text,
    token,
    keyTtlMs: ttl?.ms,
    ttlMarginMs: margin.ms,
    timeoutMs: timeout.ms,
    waitMs: duration('wait', 0, true).ms,
    retryBaseMs: retryBase.ms,
    retryCapMs: retryCap.ms,
    concurrency,
  };
}

function isOrigin(text: string): boolean {
  try {
    const u = new URL(text);
    return (
      (u.protocol === 'http:' || u.protocol === 'https:') &&
      u.pathname === '/' &&
      u.search === '' &&
      u.hash === '' &&
      !text.endsWith('?') &&
      !text.endsWith('#')
    );
  } catch {
    return false;
  }
}

/** Where a command writes. */
export interface Output {
  /**
   * Standard output. `write` calls its callback once the text has left
   * (with an error when it could not), as a Node.js stream does: a result
   * is marked reported only then, since a write to a pipe completes later
   * and a kill before it loses the text (F5).
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
      out.stderr.write(
        s.json ? `${JSON.stringify(eventJson(event))}\n` : `${progressLine(event)}\n`,
      );
    },
    onWarning: (detail) => {
      out.stderr.write(
        s.json
          ? `${JSON.stringify({ event: 'warning', detail })}\n`
          : `client: warning: ${detail}\n`,
      );
    },
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
    if (err instanceof IntentConflictError) {
      out.stderr.write(`client: ${err.message}\n`);
      return EXIT.failed;
    }
    if (err instanceof OutboxError) {
      out.stderr.write(`client: ${err.message}\n`);
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
      const report = await client.drain(drainOptions);
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
      : `${resultLine(intent, !stated.created)}\n`;
    // Marked reported once the text has left, not when the write was
    // called: a kill before the bytes leave a pipe leaves it unreported.
    const error = await written(out, text);
    if (!s.json && report?.halt !== undefined) out.stderr.write(`client: ${report.halt}\n`);
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
  // Settled by a drain, a library caller or a command killed before it
  // printed: its answer is not this command's to print, nor its exit 0.
  const failure = equal.failure === null ? '' : ` (${equal.failure})`;
  return `a ${equal.operation} equal to this one was stated under key ${equal.key} and is ${equal.state}${failure}, but its result was never printed: the same command with --key ${equal.key} prints its answer, sending nothing; --again states a second one`;
}

function list(command: Extract<Command, { kind: 'outbox-list' }>, out: Output): number {
  const { settings } = command;
  // A listing reads an outbox; it never makes one (a mistyped path would
  // list a new, empty outbox and leave the file behind).
  const outbox = Outbox.open(settings.outbox, { create: false });
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
  if (report.settled.length === 0 && report.pending === 0) {
    out.stdout.write(`nothing pending in outbox ${s.outbox}\n`);
    return code;
  }
  for (const intent of report.settled) {
    out.stdout.write(
      `${intent.state.padEnd(7)} ${intent.operation} ${intent.key}: ${outcome(intent)}\n`,
    );
  }
  const failed = report.settled.filter((i) => i.state === 'failed').length;
  out.stdout.write(
    `${String(report.settled.length)} settled (${String(failed)} failed), ${String(report.pending)} pending${report.pending > 0 ? ': "client outbox drain" sends them later with the same keys' : ''}\n`,
  );
  if (report.halt !== undefined) out.stderr.write(`client: ${report.halt}\n`);
  return code;
}
