/**
 * The typed face of the client for the ledger: intents for `createAccount`
 * and `createTransfer` whose bodies and answers are the types generated from
 * the API document (api-types.ts), and `LedgerClient`, an outbox and a
 * sender held together.
 */
import type { CreateAccount, CreateTransfer, Problem } from './api-types.js';
import { Outbox, type Intent, type NewIntent } from './outbox.js';
import { Sender, type DrainOptions, type DrainReport, type SenderOptions } from './sender.js';

/** The body of `POST /api/v1/transfers`. */
export type TransferRequest = CreateTransfer['request'];
/** The 201 answer of `POST /api/v1/transfers`. */
export type Transfer = CreateTransfer['responses'][201];
/** The body of `POST /api/v1/accounts`. */
export type AccountRequest = CreateAccount['request'];
/** The 201 answer of `POST /api/v1/accounts`. */
export type Account = CreateAccount['responses'][201];
export type { Problem };

/** Options of a typed intent. */
export interface IntentOptions {
  /** The Idempotency-Key, for a caller that keeps its own ids (a UUIDv7); default a new one. */
  readonly key?: string;
}

/** Options of a transfer intent. */
export interface TransferOptions extends IntentOptions {
  /**
   * Send it without regard to the order of other intents. By default a
   * transfer is ordered in the lanes of both its accounts: it is sent after
   * every earlier transfer that touches either account has its answer.
   */
  readonly independent?: boolean;
}

/**
 * The intent of a transfer.
 *
 * @param body the accounts and the amount.
 * @param options its key, and whether it is independent of other intents.
 * @returns what {@link Outbox.enqueue} takes.
 */
export function transferIntent(body: TransferRequest, options: TransferOptions = {}): NewIntent {
  const from = body.from_account_id.toLowerCase();
  const to = body.to_account_id.toLowerCase();
  return {
    operation: 'createTransfer',
    method: 'POST',
    path: '/api/v1/transfers',
    body: { from_account_id: from, to_account_id: to, amount: body.amount },
    lanes: options.independent === true ? [] : [`account:${from}`, `account:${to}`],
    ...(options.key === undefined ? {} : { key: options.key }),
  };
}

/**
 * The intent of opening an account. It has no lane: nothing stated earlier
 * can depend on an account that does not exist yet.
 *
 * @param body the name and the opening balance.
 * @param options its key.
 * @returns what {@link Outbox.enqueue} takes.
 */
export function accountIntent(body: AccountRequest, options: IntentOptions = {}): NewIntent {
  return {
    operation: 'createAccount',
    method: 'POST',
    path: '/api/v1/accounts',
    body: { name: body.name, opening_balance: body.opening_balance },
    lanes: [],
    ...(options.key === undefined ? {} : { key: options.key }),
  };
}

/**
 * The answer body of a settled intent, parsed: the 2xx body (cast it to the
 * operation's type, e.g. {@link Transfer}) or a {@link Problem}.
 *
 * @param intent an intent with an answer.
 * @returns the parsed body, or undefined when the intent has no answer (pending,
 *   expired) or the body is not JSON.
 */
export function answerBody(
  intent: Intent,
): { ok: true; value: unknown } | { ok: false; value: Problem } | undefined {
  const answer = intent.answer;
  if (answer === null) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(answer.body);
  } catch {
    return undefined;
  }
  return answer.status >= 200 && answer.status < 300
    ? { ok: true, value }
    : { ok: false, value: value as Problem };
}

/** What a {@link LedgerClient} is made of: the outbox file and the sender's options. */
export interface LedgerClientOptions extends Omit<SenderOptions, 'outbox'> {
  /** The outbox file (created when missing; its folder must exist). */
  readonly file: string;
}

/**
 * An outbox and its sender for the ledger's writes. State intents with
 * {@link transfer} and {@link createAccount} (stored durably, not sent),
 * then {@link drain} or {@link deliver}. One per outbox file and process.
 *
 * @example
 * const client = LedgerClient.open({ file: 'outbox.sqlite', baseUrl, token, ...DEFAULTS });
 * const intent = client.transfer({ from_account_id: a, to_account_id: b, amount: 2500 });
 * const settled = await client.deliver(intent, { deadline: Date.now() + 30_000 });
 * client.close();
 */
export class LedgerClient {
  private constructor(
    /** The open outbox. */
    readonly outbox: Outbox,
    /** The sender draining it. */
    readonly sender: Sender,
  ) {}

  /**
   * Opens the outbox and makes the sender.
   *
   * @param options the file and the sender's options.
   * @returns the client; close it when done.
   * @throws OutboxLockedError, OutboxOpenError as {@link Outbox.open} does.
   * @throws RangeError for bad sender options (the outbox is closed again).
   */
  static open(options: LedgerClientOptions): LedgerClient {
    const { file, ...rest } = options;
    const outbox = Outbox.open(file, rest.clock === undefined ? {} : { clock: rest.clock });
    try {
      return new LedgerClient(outbox, new Sender({ ...rest, outbox }));
    } catch (err) {
      outbox.close();
      throw err;
    }
  }

  /**
   * States a transfer (durably; not sent yet).
   *
   * @param body the accounts and the amount.
   * @param options its key, and whether it is independent.
   * @returns the intent (an existing one when the key names the same request).
   * @throws IntentConflictError when the key names another request in the outbox.
   */
  transfer(body: TransferRequest, options?: TransferOptions): Intent {
    return this.outbox.enqueue(transferIntent(body, options)).intent;
  }

  /**
   * States the opening of an account (durably; not sent yet).
   *
   * @param body the name and the opening balance.
   * @param options its key.
   * @returns the intent.
   * @throws IntentConflictError when the key names another request in the outbox.
   */
  createAccount(body: AccountRequest, options?: IntentOptions): Intent {
    return this.outbox.enqueue(accountIntent(body, options)).intent;
  }

  /**
   * Sends what is pending; see {@link Sender.drain}.
   *
   * @param options deadline, signal, target.
   * @returns the drain's report.
   */
  drain(options?: DrainOptions): Promise<DrainReport> {
    return this.sender.drain(options);
  }

  /**
   * Drains until the intent has its final answer (or the deadline, the
   * signal or a halt ends the drain).
   *
   * @param intent the intent.
   * @param options deadline and signal.
   * @returns the intent as it stands then (still pending when the drain ended first).
   */
  async deliver(intent: Intent, options: Omit<DrainOptions, 'target'> = {}): Promise<Intent> {
    if (intent.state === 'pending') await this.sender.drain({ ...options, target: intent.key });
    return this.outbox.get(intent.key) ?? intent;
  }

  /** Closes the outbox (its lock is released). */
  close(): void {
    this.outbox.close();
  }
}
