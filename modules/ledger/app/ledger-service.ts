/**
 * The ledger use cases: accounts with a balance in minor units, renamed under
 * an optimistic precondition, and transfers that move money between two
 * accounts of one principal in one unit of work. Every write runs in
 * `uow.run`, so on a keyed request it joins the idempotency stage's
 * transaction and commits with the stored answer; every time comes from the
 * kernel clock.
 */
import type { Clock } from '../../../kernel/clock/index.js';
import { codePoints, invalidField, problem, type AppError } from '../../../kernel/errs/index.js';
import { isUuidV7, newId, parseId, type Id } from '../../../kernel/ids/index.js';
import type { UnitOfWork } from '../../../kernel/txn/index.js';
import type { Account, AccountRepository, Transfer, TransferRepository } from './ports.js';

/** Longest account name, in Unicode code points. */
export const ACCOUNT_NAME_MAX = 100;
/**
 * The largest amount or balance, in minor units: 2^53 - 1, the largest
 * integer every JSON parser reads exactly.
 */
export const MAX_MINOR_UNITS = Number.MAX_SAFE_INTEGER;

/** C0 and C1 controls, and lone surrogates (which no UTF-8 column can hold). */
const FORBIDDEN_CHARACTERS = /[\p{Cc}\p{Cs}]/u;

/** What {@link LedgerService} is built from. */
export interface LedgerServiceDeps {
  readonly uow: UnitOfWork;
  readonly clock: Clock;
  readonly accounts: AccountRepository;
  readonly transfers: TransferRepository;
}

/** Input of {@link LedgerService.openAccount}. */
export interface OpenAccountInput {
  /** 1 to 100 characters, not blank, no control characters. */
  readonly name: string;
  /** Whole minor units, 0 to {@link MAX_MINOR_UNITS}. */
  readonly openingBalance: number;
}

/**
 * What the caller's `If-Match` asked for. Renaming needs the versions the
 * caller read: no header, or `*` (any version), is not enough.
 */
export type VersionPrecondition =
  | { readonly kind: 'missing' }
  | { readonly kind: 'any' }
  /** The versions of the strong entity tags listed; empty when none can match. */
  | { readonly kind: 'versions'; readonly versions: readonly number[] };

/** Input of {@link LedgerService.renameAccount}. */
export interface RenameAccountInput {
  /** 1 to 100 characters, not blank, no control characters. */
  readonly name: string;
  /** From `If-Match`. */
  readonly precondition: VersionPrecondition;
}

/** Input of {@link LedgerService.transfer}. */
export interface TransferInput {
  /**
   * The account to take the amount from, as the client sent it: a string
   * that is not a UUIDv7 names no account.
   */
  readonly fromAccountId: string;
  /** The account to give the amount to, as the client sent it. */
  readonly toAccountId: string;
  /** Whole minor units, 1 to {@link MAX_MINOR_UNITS}. */
  readonly amount: number;
}

/** Checks an account name; lengths count code points, as the schema and the column do. */
function checkName(name: string): void {
  const pointer = '#body/name';
  const length = name.length > 2 * ACCOUNT_NAME_MAX ? ACCOUNT_NAME_MAX + 1 : codePoints(name);
  if (length < 1) throw invalidField(pointer, 'min_length', 'name must not be empty.');
  if (length > ACCOUNT_NAME_MAX) {
    throw invalidField(
      pointer,
      'max_length',
      `name must be at most ${ACCOUNT_NAME_MAX} characters.`,
    );
  }
  if (FORBIDDEN_CHARACTERS.test(name)) {
    throw invalidField(pointer, 'invalid_characters', 'name must not contain control characters.');
  }
  if (name.trim() === '') throw invalidField(pointer, 'blank', 'name must not be blank.');
}

/** Checks a number of minor units: a safe integer from `minimum` to {@link MAX_MINOR_UNITS}. */
function checkMinorUnits(value: number, minimum: number, field: string): void {
  const pointer = `#body/${field}`;
  if (!Number.isSafeInteger(value)) {
    throw invalidField(
      pointer,
      'type',
      `${field} must be a whole number of minor units up to ${MAX_MINOR_UNITS}.`,
    );
  }
  if (value < minimum) {
    throw invalidField(pointer, 'minimum', `${field} must be at least ${minimum}.`);
  }
}

function accountNotFound(): AppError {
  return problem('not_found', 'No such account.');
}

/** The ledger module's use cases. */
export class LedgerService {
  readonly #uow: UnitOfWork;
  readonly #clock: Clock;
  readonly #accounts: AccountRepository;
  readonly #transfers: TransferRepository;

  /** @param deps the unit of work, the clock and the repositories. */
  constructor(deps: LedgerServiceDeps) {
    this.#uow = deps.uow;
    this.#clock = deps.clock;
    this.#accounts = deps.accounts;
    this.#transfers = deps.transfers;
  }

  /**
   * Opens an account holding its opening balance, at version 1.
   *
   * @param principalId the owner (on HTTP: the caller).
   * @param input name and opening balance.
   * @returns the new account.
   * @throws AppError `validation_failed` (pointer `#body/name` or
   *   `#body/opening_balance`) for a bad input; nothing is written.
   */
  async openAccount(principalId: Id, input: OpenAccountInput): Promise<Account> {
    checkName(input.name);
    checkMinorUnits(input.openingBalance, 0, 'opening_balance');
    return this.#uow.run(
      () => {
        const now = this.#clock.now();
        return this.#accounts.insert({
          id: newId(now),
          principalId,
          name: input.name,
          openingBalance: input.openingBalance,
          createdAt: now,
        });
      },
      { name: 'ledger.openAccount' },
    );
  }

  /**
   * Reads one of the caller's accounts.
   *
   * @param principalId the owner (on HTTP: the caller).
   * @param id the account.
   * @returns the account.
   * @throws AppError `not_found` when the principal has no such account,
   *   worded alike whether it is missing or someone else's.
   */
  async getAccount(principalId: Id, id: Id): Promise<Account> {
    const account = await this.#accounts.find(principalId, id);
    if (account === null) throw accountNotFound();
    return account;
  }

  /**
   * Renames one of the caller's accounts, provided it is still at a version
   * the caller read (optimistic concurrency: a lost update is refused, not
   * made). The version moves on by one.
   *
   * The checks run in this order: the account must exist (404), then the
   * precondition must be given (428), then it must hold (412).
   *
   * @param principalId the owner (on HTTP: the caller).
   * @param id the account.
   * @param input the new name and the precondition from `If-Match`.
   * @returns the renamed account.
   * @throws AppError `validation_failed` (pointer `#body/name`) for a bad
   *   name; `not_found` when the principal has no such account;
   *   `precondition_required` when no version was named; `precondition_failed`
   *   when the account is at another version. Nothing is written then.
   */
  async renameAccount(principalId: Id, id: Id, input: RenameAccountInput): Promise<Account> {
    checkName(input.name);
    const { precondition } = input;
    return this.#uow.run(
      async () => {
        const current = await this.#accounts.find(principalId, id);
        if (current === null) throw accountNotFound();
        if (precondition.kind !== 'versions') {
          throw problem(
            'precondition_required',
            precondition.kind === 'any'
              ? 'If-Match: * does not name the version that was read; renaming needs the ETag of the account.'
              : 'Renaming an account needs If-Match with the ETag of the account.',
            {
              errors: [{ pointer: '#header/If-Match', code: 'required' }],
              hint: 'Read the account, then send its ETag (for example "1") in If-Match.',
            },
          );
        }
        // The update re-checks the version itself: a concurrent rename or
        // transfer that commits first makes it match no row.
        const renamed = await this.#accounts.rename(principalId, id, {
          name: input.name,
          versions: precondition.versions,
          at: this.#clock.now(),
        });
        if (renamed === null) {
          throw problem(
            'precondition_failed',
            'The account changed since that version was read: If-Match does not name its current ETag.',
            { hint: 'Read the account again and repeat the rename with its current ETag.' },
          );
        }
        return renamed;
      },
      { name: 'ledger.renameAccount' },
    );
  }

  /**
   * Moves an amount from one of the caller's accounts to another, and
   * records the transfer, in one unit of work: either both balances change
   * and the transfer exists, or nothing happened.
   *
   * Lock order: both account rows are locked (`SELECT ... FOR UPDATE`) in
   * ascending id order before either is read or changed, so two transfers
   * crossing the same accounts (A to B while B to A) take their locks in the
   * same order and one waits for the other instead of deadlocking. On a keyed
   * request the idempotency key row is taken first, before any account.
   *
   * @param principalId the owner of both accounts (on HTTP: the caller).
   * @param input the two accounts and the amount.
   * @returns the transfer.
   * @throws AppError `validation_failed` (pointer `#body/amount`) for an
   *   amount outside 1 to {@link MAX_MINOR_UNITS}; `unprocessable` with
   *   reason `same_account` when both accounts are one; `not_found` naming
   *   each account (`#body/from_account_id`, `#body/to_account_id`) the
   *   principal does not have, worded alike whether it is missing or someone
   *   else's; `conflict` with reason `insufficient_funds` when the source
   *   holds less than the amount, or `balance_limit` when the destination
   *   would hold more than {@link MAX_MINOR_UNITS}. Nothing is written then.
   */
  async transfer(principalId: Id, input: TransferInput): Promise<Transfer> {
    checkMinorUnits(input.amount, 1, 'amount');
    if (input.fromAccountId.toLowerCase() === input.toAccountId.toLowerCase()) {
      throw problem('unprocessable', 'A transfer needs two different accounts.', {
        reason: 'same_account',
        errors: [{ pointer: '#body/to_account_id', code: 'same_account' }],
      });
    }
    const fromId = isUuidV7(input.fromAccountId) ? parseId(input.fromAccountId) : null;
    const toId = isUuidV7(input.toAccountId) ? parseId(input.toAccountId) : null;
    return this.#uow.run(
      async () => {
        const now = this.#clock.now();
        const transfer = {
          id: newId(now),
          principalId,
          fromAccountId: fromId,
          toAccountId: toId,
          amount: input.amount,
          createdAt: now,
        };
        const checks = await this.#accounts.transfer(
          principalId,
          {
            id: transfer.id,
            fromAccountId: fromId,
            toAccountId: toId,
            amount: input.amount,
            at: now,
          },
          MAX_MINOR_UNITS,
        );
        if (!checks.from || !checks.to || fromId === null || toId === null) {
          throw problem('not_found', 'No such account.', {
            errors: [
              ...(!checks.from ? [{ pointer: '#body/from_account_id', code: 'not_found' }] : []),
              ...(!checks.to ? [{ pointer: '#body/to_account_id', code: 'not_found' }] : []),
            ],
          });
        }
        if (!checks.funds) {
          throw problem('conflict', 'The source account holds less than the amount.', {
            reason: 'insufficient_funds',
            hint: 'Transfer at most the balance of from_account_id.',
          });
        }
        if (!checks.room) {
          throw problem(
            'conflict',
            `The destination account would hold more than ${MAX_MINOR_UNITS} minor units.`,
            { reason: 'balance_limit' },
          );
        }
        return { ...transfer, fromAccountId: fromId, toAccountId: toId } satisfies Transfer;
      },
      { name: 'ledger.transfer' },
    );
  }

  /**
   * Reads one of the caller's transfers.
   *
   * @param principalId the owner (on HTTP: the caller).
   * @param id the transfer.
   * @returns the transfer.
   * @throws AppError `not_found` when the principal has no such transfer.
   */
  async getTransfer(principalId: Id, id: Id): Promise<Transfer> {
    const transfer = await this.#transfers.find(principalId, id);
    if (transfer === null) throw problem('not_found', 'No such transfer.');
    return transfer;
  }
}
