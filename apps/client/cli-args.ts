/**
 * The command line's parser: arguments and `CLIENT_*` environment variables
 * (a flag wins) into a {@link Command}, every bad one refused in one line
 * naming the flag or variable ({@link UsageError}).
 */
import {
  UsageError,
  type Command,
  type CommonSettings,
  type Environment,
  type SendSettings,
} from './cli-command.js';
import { bearerToken, parseArgsMessage, type Source } from './cli-usage.js';
import { checkKey } from './outbox.js';
import { badPort } from './sender-origin.js';

// A built-in through process.getBuiltinModule, not an ES import: the import
// reads every export of the module, lazy ones included, which costs the
// command line's start-up (docs/DECISIONS.md, "The client sends with
// node:http").
const { parseArgs } = process.getBuiltinModule('node:util');

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
  let parsed: {
    values: Values;
    positionals: string[];
    tokens: readonly { kind: string; name?: string }[];
  };
  try {
    parsed = parseArgs({
      args: [...argv],
      options: OPTIONS,
      strict: true,
      allowPositionals: true,
      tokens: true,
    });
  } catch (err) {
    throw new UsageError(parseArgsMessage(err));
  }
  const { values, positionals } = parsed;
  // parseArgs keeps the last of a repeated flag: `--amount 5 --amount 6`
  // would state a transfer of 6 without a word. Refused instead.
  const seen = new Set<string>();
  for (const token of parsed.tokens) {
    if (token.kind !== 'option' || token.name === undefined) continue;
    if (seen.has(token.name)) {
      throw new UsageError(`--${token.name} is given twice: give it once`);
    }
    seen.add(token.name);
  }
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
  const parsed = new URL(baseUrl.text);
  if (parsed.username !== '' || parsed.password !== '') {
    throw new UsageError(
      `${baseUrl.name} must not carry a user name or password (the token is the credential), got an origin with them`,
    );
  }
  const refused = badPort(parsed);
  if (refused !== undefined) {
    throw new UsageError(
      `${baseUrl.name} is on port ${String(refused)}, one fetch refuses to connect to (a bad port of the Fetch standard), got "${baseUrl.text}": use another port`,
    );
  }
  const tokenSource = required('token');
  const token = tokenSource.text;
  bearerToken(tokenSource);
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
