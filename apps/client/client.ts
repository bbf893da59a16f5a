/**
 * The typed face of the client for the ledger: intents for `createAccount`
 * and `createTransfer` whose bodies and answers are the types generated from
 * the API document (api-types.ts), and `LedgerClient`, an outbox and a
 * sender held together with the rules a program needs on top of them: an
 * equal intent whose result was never reported is not stated again, an
 * intent is delivered by a drain that stops once it settles, and a settled
 * intent's verdict (done, refused by the server, failed) is read one way.
 * The command line is argument parsing and printing over this.
 */
import type { CreateAccount, CreateTransfer, Problem } from './api-types.js';
import { Outbox, type Intent, type NewIntent } from './outbox.js';
import { Sender, type DrainOptions, type DrainReport, type SenderOptions } from './sender.js';

/**
 * An intent equal to the one being stated (same operation, method, path
 * and body) is pending, or settled while its result was never reported to
 * anyone: stating a second one would send the same request again under a
 * new key, and the money would move twice. Deliver that one (its key is
 * {@link intent}), or state with `again` to mean a second one.
 */
export class EqualIntentError extends Error {
  override readonly name = 'EqualIntentError';

  /**
   * @param intent the equal intent found.
   */
  constructor(readonly intent: Intent) {
    super(
      mayHaveTakenEffect(intent)
        ? // The request may have taken effect: a second one could do it twice.
          `a ${intent.operation} equal to this one was stated under key ${intent.key} and its outcome is unknown (${unknownOutcomeText(intent)}), its result never reported: an attempt may have taken effect, so do not state it again: check whether it took effect (read what ${intent.method} ${intent.path} writes), and read what it met with that key; state with again only once the check shows it did not`
        : `a ${intent.operation} equal to this one was stated under key ${intent.key} and is ${intent.state}${intent.failure === null ? '' : ` (${intent.failure})`}, its result never reported: deliver it with that key, or state with again to mean a second one`,
    );
  }
}

/**
 * Whether a failed intent may have taken effect on the server: its outcome
 * is unknown (an attempt may have reached the server and no answer says
 * what happened), or its key grew too old to repeat, which leaves what any
 * attempt did just as unknown. An expired intent with no attempt counted
 * here may still have been sent: a key the caller gave (sent before by a
 * program of its own), or a restored copy of the outbox. Such an intent
 * must be checked, never stated again as the way on.
 *
 * @param intent the intent as it stands.
 * @returns true for `outcome_unknown` and for `expired`.
 */
export function mayHaveTakenEffect(intent: Pick<Intent, 'failure'>): boolean {
  return intent.failure === 'outcome_unknown' || intent.failure === 'expired';
}

/**
 * Why an intent's outcome is unknown, in words for a message.
 *
 * @param intent an intent {@link mayHaveTakenEffect} holds true of.
 * @returns `failed outcome_unknown`, or `failed expired` with the attempts
 *   counted, e.g. `failed expired, after an attempt`.
 */
export function unknownOutcomeText(intent: Pick<Intent, 'failure' | 'attempts'>): string {
  if (intent.failure !== 'expired') return `failed ${String(intent.failure)}`;
  const counted =
    intent.attempts === 0
      ? 'no attempt counted here'
      : intent.attempts === 1
        ? 'after an attempt'
        : `after ${String(intent.attempts)} attempts`;
  return `failed expired, ${counted}`;
}

/** Options of stating an intent through {@link LedgerClient}. */
export interface StateOptions {
  /**
   * State it even when an equal intent is pending or settled and not
   * reported ({@link EqualIntentError}); default false. Not needed with a
   * key of the caller's: the key names the intent.
   */
  readonly again?: boolean;
}

/**
 * What a settled intent means for its caller: `ok` (a 2xx), `rejected`
 * (the server's stored refusal, marked with `Idempotent-Replay`), `failed`
 * (key reuse, an expired key, an unexpected answer, an unknown outcome, or
 * an unmarked refusal, which is not known to be the server's), or `pending`.
 */
export type Verdict = 'ok' | 'rejected' | 'failed' | 'pending';

/**
 * Reads an intent's verdict.
 *
 * @param intent the intent as it stands.
 * @returns its {@link Verdict}.
 */
export function intentVerdict(intent: Pick<Intent, 'state' | 'answer'>): Verdict {
  if (intent.state === 'pending') return 'pending';
  if (intent.state === 'failed') return 'failed';
  const status = intent.answer?.status ?? 0;
  if (status >= 200 && status < 300) return 'ok';
  // Refused by the server only when the refusal is the key's marked
  // answer; an unmarked one recorded by an older client is not known to be.
  return intent.answer?.marked === true ? 'rejected' : 'failed';
}

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
 * then {@link drain} or {@link deliver}, and {@link report} a settled
 * intent once its result reached the person or program that wanted it.
 * One per outbox file and process.
 *
 * @example
 * const client = LedgerClient.open({ file: 'outbox.sqlite', baseUrl, token, ...DEFAULTS });
 * const intent = client.transfer({ from_account_id: a, to_account_id: b, amount: 2500 });
 * const settled = await client.deliver(intent, { deadline: Date.now() + 30_000 });
 * console.log(intentVerdict(settled));
 * client.report(settled);
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
    const outbox = Outbox.open(file, {
      ...(rest.clock === undefined ? {} : { clock: rest.clock }),
      ...(rest.onWarning === undefined ? {} : { onWarning: rest.onWarning }),
    });
    try {
      return new LedgerClient(outbox, new Sender({ ...rest, outbox }));
    } catch (err) {
      outbox.close();
      throw err;
    }
  }

  /**
   * States an intent (durably; not sent yet), unless an equal one was never
   * reported: without a key of the caller's and without `again`, an equal
   * intent pending or settled unreported is refused.
   *
   * @param intent what to send (e.g. {@link transferIntent}'s).
   * @param options `again` to state a second equal intent on purpose.
   * @returns the intent, and whether it is new (false: the caller's key
   *   named an intent in the outbox already).
   * @throws EqualIntentError when an equal intent was never reported.
   * @throws IntentConflictError when the key names another request in the outbox.
   * @throws RangeError as {@link Outbox.enqueue} does.
   */
  state(intent: NewIntent, options: StateOptions = {}): { intent: Intent; created: boolean } {
    if (intent.key === undefined && options.again !== true) {
      const equal = this.outbox.unreportedEqual(intent);
      if (equal !== undefined) throw new EqualIntentError(equal);
    }
    return this.outbox.enqueue(intent);
  }

  /**
   * States a transfer (durably; not sent yet); see {@link state}.
   *
   * @param body the accounts and the amount.
   * @param options its key, whether it is independent, and `again`.
   * @returns the intent (an existing one when the key names the same request).
   * @throws EqualIntentError when an equal intent was never reported.
   * @throws IntentConflictError when the key names another request in the outbox.
   */
  transfer(body: TransferRequest, options: TransferOptions & StateOptions = {}): Intent {
    return this.state(transferIntent(body, options), options).intent;
  }

  /**
   * States the opening of an account (durably; not sent yet); see {@link state}.
   *
   * @param body the name and the opening balance.
   * @param options its key, and `again`.
   * @returns the intent.
   * @throws EqualIntentError when an equal intent was never reported.
   * @throws IntentConflictError when the key names another request in the outbox.
   */
  createAccount(body: AccountRequest, options: IntentOptions & StateOptions = {}): Intent {
    return this.state(accountIntent(body, options), options).intent;
  }

  /**
   * Records that a settled intent's result reached its caller, so an equal
   * intent may be stated again without `again`. Nothing is written for a
   * pending intent.
   *
   * @param intent the intent.
   */
  report(intent: Intent): void {
    this.outbox.markReported(intent.seq, Date.now());
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
    return (await this.settle(intent, options)).intent;
  }

  /**
   * {@link deliver}, with the drain's report: why it stopped, a halt's
   * detail, and what else settled on the way.
   *
   * @param intent the intent.
   * @param options deadline and signal.
   * @returns the intent as it stands then, and the report (undefined when
   *   it was settled already and nothing was sent).
   */
  async settle(
    intent: Intent,
    options: Omit<DrainOptions, 'target'> = {},
  ): Promise<{ intent: Intent; report: DrainReport | undefined }> {
    const report =
      intent.state === 'pending'
        ? await this.sender.drain({ ...options, target: intent.key })
        : undefined;
    return { intent: this.outbox.get(intent.key) ?? intent, report };
  }

  /** Closes the outbox (its lock is released) and the idle connections to the server. */
  close(): void {
    this.sender.close();
    this.outbox.close();
  }
}
