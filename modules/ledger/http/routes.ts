/**
 * The ledger routes under /api/v1: the caller's accounts and the transfers
 * between them. Handlers return their payload or throw an AppError; they
 * never send, stream or hijack, so the idempotency stage can capture what
 * they return. They set `ETag` and `Location` themselves too, so an unkeyed
 * request gets the same headers a keyed one gets from the idempotency stage.
 */
import { problem } from '../../../kernel/errs/index.js';
import { isUuidV7, parseId, type Id } from '../../../kernel/ids/index.js';
import { caller } from '../../../platform/http/caller.js';
import type { HttpServer } from '../../../platform/http/server.js';
import type { Account, Transfer } from '../app/ports.js';
import type { LedgerService } from '../app/ledger-service.js';
import { etagOf, readIfMatch } from './if-match.js';
import {
  AccountEtagHeaders,
  AccountIdParams,
  AccountSchema,
  CreateTransferBody,
  NewAccountHeaders,
  NewTransferHeaders,
  OpenAccountBody,
  RenameAccountBody,
  RenameAccountHeaders,
  TAG,
  TransferIdParams,
  TransferSchema,
} from './schemas.js';
import {
  COMMON_PROBLEMS,
  KEYED_PROBLEMS,
  ProblemSchema,
} from '../../../platform/http/problem-schemas.js';
import { strictValidatorCompiler } from './validation.js';

/** An account answer: the body's version is also its ETag. */
const AccountWithEtag = { ...AccountSchema, headers: AccountEtagHeaders };
/** A new account: its ETag and its Location. */
const NewAccount = { ...AccountSchema, headers: NewAccountHeaders };
/** A new transfer: its Location. */
const NewTransfer = { ...TransferSchema, headers: NewTransferHeaders };

/** Where an account or a transfer can be read. */
const ACCOUNT_LOCATION = '/api/v1/accounts/{id}';
const TRANSFER_LOCATION = '/api/v1/transfers/{id}';

/**
 * A path id as a ledger id. Ids are UUIDv7; any other uuid names nothing,
 * so it is the route's 404 rather than a crash in parseId.
 */
function pathId(id: string, what: 'account' | 'transfer'): Id {
  if (!isUuidV7(id)) throw problem('not_found', `No such ${what}.`);
  return parseId(id);
}

function accountBody(account: Account) {
  return {
    id: account.id,
    name: account.name,
    balance: account.balance,
    version: account.version,
    created_at: account.createdAt.toISOString(),
    updated_at: account.updatedAt.toISOString(),
  };
}

function transferBody(transfer: Transfer) {
  return {
    id: transfer.id,
    from_account_id: transfer.fromAccountId,
    to_account_id: transfer.toAccountId,
    amount: transfer.amount,
    created_at: transfer.createdAt.toISOString(),
  };
}

/**
 * Registers the ledger routes on the server.
 *
 * @param app the server, with the cross-cutting stages already registered.
 * @param ledger the ledger use cases.
 */
export function registerLedgerRoutes(app: HttpServer, ledger: LedgerService): void {
  app.post(
    '/api/v1/accounts',
    {
      config: { auth: 'required', idempotent: true, location: ACCOUNT_LOCATION },
      validatorCompiler: strictValidatorCompiler,
      schema: {
        operationId: 'createAccount',
        tags: [TAG],
        summary: 'Open an account',
        description:
          'Opens an account of the caller holding the opening balance (integer minor units), at version 1. The answer carries the account, its ETag and its Location.',
        body: OpenAccountBody,
        response: { 201: NewAccount, ...KEYED_PROBLEMS },
      },
    },
    async (req, reply) => {
      const { principalId } = caller();
      const account = await ledger.openAccount(principalId, {
        name: req.body.name,
        openingBalance: req.body.opening_balance,
      });
      reply.code(201);
      reply.header('etag', etagOf(account.version));
      reply.header('location', ACCOUNT_LOCATION.replace('{id}', account.id));
      return accountBody(account);
    },
  );

  app.get(
    '/api/v1/accounts/:id',
    {
      config: { auth: 'required' },
      validatorCompiler: strictValidatorCompiler,
      schema: {
        operationId: 'getAccount',
        tags: [TAG],
        summary: 'Read an account',
        description:
          "One of the caller's accounts with its balance; the ETag is its version. Another principal's account is 404, exactly as one that does not exist.",
        params: AccountIdParams,
        response: {
          200: AccountWithEtag,
          400: ProblemSchema,
          404: ProblemSchema,
          ...COMMON_PROBLEMS,
        },
      },
    },
    async (req, reply) => {
      const { principalId } = caller();
      const account = await ledger.getAccount(principalId, pathId(req.params.id, 'account'));
      reply.header('etag', etagOf(account.version));
      return accountBody(account);
    },
  );

  app.patch(
    '/api/v1/accounts/:id',
    {
      config: { auth: 'required', idempotent: true },
      validatorCompiler: strictValidatorCompiler,
      schema: {
        operationId: 'renameAccount',
        tags: [TAG],
        summary: 'Rename an account',
        description:
          "Renames one of the caller's accounts. If-Match with the account's current ETag is required: without it the answer is 428, and with a version that is no longer current (the account was renamed or took part in a transfer since) it is 412. The version moves on by one.",
        params: AccountIdParams,
        headers: RenameAccountHeaders,
        body: RenameAccountBody,
        response: {
          200: AccountWithEtag,
          404: ProblemSchema,
          412: ProblemSchema,
          428: ProblemSchema,
          ...KEYED_PROBLEMS,
        },
      },
    },
    async (req, reply) => {
      const { principalId } = caller();
      const id = pathId(req.params.id, 'account');
      const precondition = readIfMatch(req.headers['if-match']);
      const account = await ledger.renameAccount(principalId, id, {
        name: req.body.name,
        precondition,
      });
      reply.header('etag', etagOf(account.version));
      return accountBody(account);
    },
  );

  app.post(
    '/api/v1/transfers',
    {
      config: { auth: 'required', idempotent: true, location: TRANSFER_LOCATION },
      validatorCompiler: strictValidatorCompiler,
      schema: {
        operationId: 'createTransfer',
        tags: [TAG],
        summary: 'Move money between two accounts',
        description:
          "Moves an amount (integer minor units) from one of the caller's accounts to another in one transaction, and records the transfer. An unknown account, or one of another principal, is 404; a source holding less than the amount is 409 with reason insufficient_funds (nothing moves); the same account on both sides is 422 with reason same_account. Send an Idempotency-Key so a retry cannot move the money twice.",
        body: CreateTransferBody,
        response: { 201: NewTransfer, 404: ProblemSchema, ...KEYED_PROBLEMS },
      },
    },
    async (req, reply) => {
      const { principalId } = caller();
      const transfer = await ledger.transfer(principalId, {
        fromAccountId: req.body.from_account_id,
        toAccountId: req.body.to_account_id,
        amount: req.body.amount,
      });
      reply.code(201);
      reply.header('location', TRANSFER_LOCATION.replace('{id}', transfer.id));
      return transferBody(transfer);
    },
  );

  app.get(
    '/api/v1/transfers/:id',
    {
      config: { auth: 'required' },
      validatorCompiler: strictValidatorCompiler,
      schema: {
        operationId: 'getTransfer',
        tags: [TAG],
        summary: 'Read a transfer',
        description:
          "One of the caller's transfers. Another principal's transfer is 404, exactly as one that does not exist.",
        params: TransferIdParams,
        response: {
          200: TransferSchema,
          400: ProblemSchema,
          404: ProblemSchema,
          ...COMMON_PROBLEMS,
        },
      },
    },
    async (req) => {
      const { principalId } = caller();
      return transferBody(await ledger.getTransfer(principalId, pathId(req.params.id, 'transfer')));
    },
  );
}
