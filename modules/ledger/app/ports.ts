/**
 * The storage the ledger use cases need, as interfaces the adapters implement
 * (adapters/postgres). The use cases never see a table name. Amounts and
 * balances are whole numbers of minor units, at most
 * `Number.MAX_SAFE_INTEGER`, so a JavaScript number holds them exactly.
 */
import type { Id } from '../../../kernel/ids/index.js';

/** An account as stored. */
export interface Account {
  readonly id: Id;
  /** The owner: the only principal that can see or use the account. */
  readonly principalId: Id;
  /** 1 to 100 characters, no control characters. */
  readonly name: string;
  /** The balance the account was opened with; it never changes. */
  readonly openingBalance: number;
  /** The current balance in minor units, never negative. */
  readonly balance: number;
  /** 1 when opened, one more with every change (rename or transfer): the ETag. */
  readonly version: number;
  readonly createdAt: Date;
  /** The time of the latest change; the creation time until the first one. */
  readonly updatedAt: Date;
}

/** An account about to be opened: its balance is the opening balance, its version 1. */
export interface NewAccount {
  readonly id: Id;
  readonly principalId: Id;
  readonly name: string;
  readonly openingBalance: number;
  /** Also its first `updatedAt`. */
  readonly createdAt: Date;
}

/** What {@link AccountRepository.transfer} found; it wrote only when all hold. */
export interface TransferChecks {
  /** The principal has the source account. */
  readonly from: boolean;
  /** The principal has the destination account. */
  readonly to: boolean;
  /** The source holds at least the amount. */
  readonly funds: boolean;
  /** The destination stays within the most an account may hold. */
  readonly room: boolean;
}

/** A transfer of an amount between two accounts of one principal; never changes. */
export interface Transfer {
  readonly id: Id;
  readonly principalId: Id;
  readonly fromAccountId: Id;
  readonly toAccountId: Id;
  /** In minor units, at least 1. */
  readonly amount: number;
  readonly createdAt: Date;
}

/** Where accounts live. */
export interface AccountRepository {
  /**
   * Opens an account with its opening balance as balance and version 1.
   *
   * @param account the new account.
   * @returns the stored account.
   * @throws TransactionRequiredError outside a unit of work; the driver's
   *   error when a constraint fails.
   */
  insert(account: NewAccount): Promise<Account>;
  /**
   * Reads an account of a principal.
   *
   * @param principalId the owner; another principal's account is not found.
   * @param id the account.
   * @returns the account, or null.
   */
  find(principalId: Id, id: Id): Promise<Account | null>;
  /**
   * Renames an account when its version is one of the expected ones, moving
   * the version on by one.
   *
   * @param principalId the owner.
   * @param id the account.
   * @param change the new name, the versions the caller accepts (from
   *   If-Match) and the time of the change.
   * @returns the renamed account, or null when the principal has no such
   *   account or its version is none of the expected ones.
   * @throws TransactionRequiredError outside a unit of work.
   */
  rename(
    principalId: Id,
    id: Id,
    change: { readonly name: string; readonly versions: readonly number[]; readonly at: Date },
  ): Promise<Account | null>;
  /**
   * Makes a transfer in one statement: locks the principal's two accounts
   * (`FOR UPDATE`, in ascending id order whatever the direction, so two
   * transfers over the same pair in opposite directions wait for each
   * other instead of deadlocking), checks them, and only when every check
   * holds moves the amount (both versions on by one) and records the
   * transfer. When a check fails nothing is written.
   *
   * @param principalId the owner; another principal's accounts are neither
   *   locked, checked nor touched.
   * @param transfer the new transfer's id, the two accounts (null: an id
   *   that names no account), the amount and the time.
   * @param maxBalance the most an account may hold.
   * @returns which checks held.
   * @throws TransactionRequiredError outside a unit of work.
   */
  transfer(
    principalId: Id,
    transfer: {
      readonly id: Id;
      readonly fromAccountId: Id | null;
      readonly toAccountId: Id | null;
      readonly amount: number;
      readonly at: Date;
    },
    maxBalance: number,
  ): Promise<TransferChecks>;
}

/** Where transfers are read (they are written by {@link AccountRepository.transfer}). */
export interface TransferRepository {
  /**
   * Reads a transfer of a principal.
   *
   * @param principalId the owner; another principal's transfer is not found.
   * @param id the transfer.
   * @returns the transfer, or null.
   */
  find(principalId: Id, id: Id): Promise<Transfer | null>;
}
