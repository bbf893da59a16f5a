/**
 * What the command line prints: the JSON forms of intents and progress
 * events (`--json`), and the human lines of results, progress and
 * `outbox list`. Pure functions of what the outbox and the sender report.
 */
import type { Intent, IntentState } from './outbox.js';
import { STORED_ERROR_STATUSES } from './retry.js';
import { OVERSIZE_NOTE, type SendEvent } from './sender.js';

/** The JSON form of an intent, as `--json` prints it. */
export interface IntentJson {
  readonly seq: number;
  readonly key: string;
  readonly operation: string;
  readonly method: string;
  readonly path: string;
  /** The body sent, parsed. */
  readonly request: unknown;
  readonly lanes: readonly string[];
  readonly created_at: string;
  readonly state: IntentState;
  readonly failure: string | null;
  readonly attempts: number;
  /** When the attempt in flight started; on a listed intent, an attempt cut off before its answer. */
  readonly attempt_started_at: string | null;
  readonly last_error: string | null;
  /** For a pending intent, when it may be sent next. */
  readonly next_attempt_at: string | null;
  readonly answer: {
    readonly status: number;
    readonly replayed: boolean;
    /** Whether it carried `Idempotent-Replay` (the key's stored answer); null: not known. */
    readonly marked: boolean | null;
    readonly headers: Readonly<Record<string, string>>;
    /** The body parsed as JSON, or its text when it is not JSON. */
    readonly body: unknown;
  } | null;
  readonly finished_at: string | null;
}

/**
 * Parses JSON text, or keeps the text when it is not JSON.
 *
 * @param text the text.
 * @returns the parsed value, or the text itself.
 */
export function parseOr(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/**
 * A time as ISO 8601 text.
 *
 * @param ms milliseconds since the epoch.
 * @returns e.g. `2026-06-01T10:00:00.000Z`.
 */
export const iso = (ms: number): string => new Date(ms).toISOString();

/**
 * The JSON form of an intent.
 *
 * @param intent the intent.
 * @returns its `--json` form.
 */
export function intentJson(intent: Intent): IntentJson {
  return {
    seq: intent.seq,
    key: intent.key,
    operation: intent.operation,
    method: intent.method,
    path: intent.path,
    request: intent.body === null ? null : parseOr(intent.body),
    lanes: intent.lanes,
    created_at: iso(intent.createdAt),
    state: intent.state,
    failure: intent.failure,
    attempts: intent.attempts,
    attempt_started_at: intent.attemptStartedAt === null ? null : iso(intent.attemptStartedAt),
    last_error: intent.lastError,
    next_attempt_at:
      intent.state === 'pending' ? iso(Math.max(intent.nextAttemptAt, intent.createdAt)) : null,
    answer:
      intent.answer === null
        ? null
        : {
            status: intent.answer.status,
            replayed: intent.answer.replayed,
            marked: intent.answer.marked,
            headers: intent.answer.headers,
            body: parseOr(intent.answer.body),
          },
    finished_at: intent.finishedAt === null ? null : iso(intent.finishedAt),
  };
}

/**
 * The JSON line of a progress event, as `--json` writes it to standard error.
 *
 * @param event the event.
 * @returns its JSON form (snake_case members, the intent in its {@link intentJson} form).
 */
export function eventJson(event: SendEvent): Record<string, unknown> {
  switch (event.type) {
    case 'principal':
      return { event: 'principal', principal_id: event.principalId };
    case 'attempt':
      return {
        event: 'attempt',
        key: event.key,
        seq: event.seq,
        operation: event.operation,
        attempt: event.attempt,
      };
    case 'retry':
      return {
        event: 'retry',
        key: event.key,
        seq: event.seq,
        operation: event.operation,
        attempt: event.attempt,
        error: event.error,
        delay_ms: event.delayMs,
      };
    case 'settled':
      return { event: 'settled', intent: intentJson(event.intent) };
    case 'expired':
      return { event: 'expired', intent: intentJson(event.intent), age_ms: event.ageMs };
    case 'halted':
      return { event: 'halted', reason: event.reason, detail: event.detail };
  }
}

function seconds(ms: number): string {
  return ms < 1_000 ? `${String(ms)}ms` : `${(ms / 1_000).toFixed(1)}s`;
}

/**
 * What to check when an intent may or may not have taken effect, in the
 * words of its operation.
 *
 * @param intent the intent.
 * @returns the advice, e.g. `check the balances of both accounts (...)`.
 */
export function checkAdvice(intent: Pick<Intent, 'operation' | 'method' | 'path'>): string {
  switch (intent.operation) {
    case 'createTransfer':
      return 'check the balances of both accounts (GET /api/v1/accounts/{id})';
    case 'createAccount':
      return 'check whether the account was opened';
    default:
      return `check whether ${intent.method} ${intent.path} took effect (e.g. GET what it writes)`;
  }
}

// C0 controls (line breaks and ESC among them), DEL and the C1 controls
// (U+009B is a one-character escape sequence for some terminals), the line
// and paragraph separators, and the bidirectional marks, embeddings,
// overrides and isolates, which can show a line's words in another order
// than they are; and the backslash, which begins the escapes written for
// them. Matching control characters is this pattern's purpose.
const CONTROL =
  // eslint-disable-next-line no-control-regex
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\\]/g;

/**
 * A text for the terminal with every control character written as its
 * `\uXXXX` escape: a server's or gateway's words (a problem's code and
 * detail, an error) could otherwise move the cursor, clear the line and
 * print a result that is not the one recorded, or split the one line a
 * result is. A backslash is doubled, so a server's own `\u001b` is not
 * read as an escape of ours.
 *
 * @param text any text.
 * @returns the text, controls escaped.
 */
export function printable(text: string): string {
  return text.replace(CONTROL, (c) =>
    c === '\\' ? '\\\\' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * One line on what an intent's answer or state is, for people, in
 * printable characters only ({@link printable}).
 *
 * @param intent the intent.
 * @returns the line, without a newline.
 */
export function outcome(intent: Intent): string {
  return printable(outcomeText(intent));
}

function outcomeText(intent: Intent): string {
  const a = intent.answer;
  if (intent.state === 'pending') {
    // Set while an attempt is in flight: when the outbox is read, no
    // process is sending it (the file is locked), so it was cut off.
    const cut = intent.attemptStartedAt !== null;
    const last =
      intent.lastError === null ? '' : `${cut ? '; before it' : ', last'}: ${intent.lastError}`;
    const how = cut ? ', the last cut off before its answer: it may have reached the server' : '';
    return `pending (attempts ${String(intent.attempts)}${how}${last})`;
  }
  if (intent.failure === 'expired') {
    return 'expired: its key is older than the key TTL less the margin, so it was not sent again; check whether it took effect before stating it again';
  }
  if (a === null) return intent.state;
  const body = parseOr(a.body);
  const problem =
    typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  const code = typeof problem['code'] === 'string' ? ` ${problem['code']}` : '';
  const reason = typeof problem['reason'] === 'string' ? ` (${problem['reason']})` : '';
  const detail = typeof problem['detail'] === 'string' ? `: ${problem['detail']}` : '';
  const replay = a.replayed ? ' (replayed: the stored answer of an earlier attempt)' : '';
  if (intent.failure === 'key_reuse') {
    return `${String(a.status)}${code}: the key was used for another request, a bug of the caller; not sent again, and no new key is made`;
  }
  if (intent.failure === 'outcome_unknown' && intent.lastError === OVERSIZE_NOTE) {
    return `outcome unknown: ${String(a.status)} with a body over 1 MiB, not read, so what it says is not known (it may be the key's committed answer); an attempt may have taken effect: ${checkAdvice(intent)} before stating it again as a new intent; not sent again`;
  }
  const storedStatus = (a.status >= 200 && a.status < 300) || STORED_ERROR_STATUSES.has(a.status);
  if (intent.failure === 'outcome_unknown' && !storedStatus) {
    return `outcome unknown: ${String(a.status)}${code}${detail}: an answer the API does not give to this request, so not the key's stored answer, after an earlier attempt that may have reached the server; an attempt may have taken effect: ${checkAdvice(intent)} before stating it again as a new intent; not sent again`;
  }
  if (intent.failure === 'outcome_unknown') {
    return `outcome unknown: ${String(a.status)}${code}${detail} without Idempotent-Replay, so not the key's stored answer (a gateway's, or a refusal before the key was looked up), and the repeat got no marked answer either; an attempt may have taken effect: ${checkAdvice(intent)} before stating it again as a new intent; not sent again`;
  }
  if (intent.failure === 'unexpected_answer') {
    return `${String(a.status)}${code}${detail}: an answer the API does not give to this request; not sent again`;
  }
  if (a.status >= 200 && a.status < 300) return `${String(a.status)}${replay}`;
  return `${String(a.status)}${code}${reason}${detail}${replay}`;
}

/**
 * The human line of a progress event, written to standard error.
 *
 * @param event the event.
 * @returns the line, without a newline.
 */
export function progressLine(event: SendEvent): string {
  return printable(progressText(event));
}

function progressText(event: SendEvent): string {
  switch (event.type) {
    case 'principal':
      return `sending as principal ${event.principalId}`;
    case 'attempt':
      return `sending ${event.operation} ${event.key} (attempt ${String(event.attempt)})`;
    case 'retry':
      return `attempt ${String(event.attempt)} of ${event.operation}${event.key === null ? '' : ` ${event.key}`}: ${event.error}; next attempt in ${seconds(event.delayMs)}`;
    case 'settled':
      return `settled ${event.intent.operation} ${event.intent.key}: ${outcomeText(event.intent)}`;
    case 'expired':
      return `expired ${event.intent.operation} ${event.intent.key} (${seconds(event.ageMs)} old): not sent`;
    case 'halted':
      return `stopped: ${event.detail}`;
  }
}

/**
 * The result line of a command's own intent, written to standard output.
 *
 * @param intent the intent as it stands after the command.
 * @param fromOutbox whether it was stated before (its key was in the outbox already).
 * @param unreached for a pending intent, why the server was not reached
 *   (the drain report's `unreached`), when it was not.
 * @returns the line, without a newline.
 */
export function resultLine(intent: Intent, fromOutbox: boolean, unreached?: string): string {
  return printable(resultText(intent, fromOutbox, unreached));
}

function resultText(intent: Intent, fromOutbox: boolean, unreached?: string): string {
  const prefix = `${intent.operation === 'createTransfer' ? 'transfer' : 'account'} ${intent.key}`;
  const again = fromOutbox ? ' (from the outbox: stated before, not sent again)' : '';
  const a = intent.answer;
  if (intent.state === 'pending') {
    const why = unreached === undefined ? '' : `: the server was not reached: ${unreached}`;
    return `${prefix}: still pending (attempts ${String(intent.attempts)}${intent.lastError === null ? '' : `, last: ${intent.lastError}`})${why}; "client outbox drain" (or this command with --key ${intent.key}) sends it with the same key`;
  }
  if (intent.state === 'failed') return `${prefix}: FAILED: ${outcomeText(intent)}`;
  if (a !== null && a.status >= 200 && a.status < 300) {
    const parsed = parseOr(a.body);
    const replay = a.replayed ? ' (a replay of the stored answer)' : '';
    if (intent.lastError === OVERSIZE_NOTE) {
      return `${prefix}: ${String(a.status)}, the key's answer, its body over 1 MiB not kept${replay}${again}`;
    }
    // Checked before it is read: the answer is recorded already, and a body
    // that is null, not JSON or not an object must not throw now.
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return `${prefix}: ${String(a.status)}, its body not the JSON object this API answers ("${a.body.slice(0, 200)}")${replay}${again}`;
    }
    const body = parsed as Record<string, unknown>;
    if (intent.operation === 'createAccount') {
      return `account ${String(body['id'])} "${String(body['name'])}" opened with balance ${String(body['balance'])}${replay}${again}`;
    }
    return `${prefix}: ${String(a.status)} created: transfer ${String(body['id'])} moved ${String(body['amount'])} from ${String(body['from_account_id'])} to ${String(body['to_account_id'])}${replay}${again}`;
  }
  return `${prefix}: refused: ${outcomeText(intent)}${again}`;
}

/**
 * The line of an intent in `outbox list`.
 *
 * @param intent the intent.
 * @returns the line, without a newline.
 */
export function listLine(intent: Intent): string {
  return `${String(intent.seq).padStart(4)}  ${intent.state.padEnd(7)}  ${intent.operation.padEnd(14)} ${intent.key}  ${iso(intent.createdAt)}  ${outcome(intent)}`;
}
