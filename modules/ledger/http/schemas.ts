/**
 * TypeBox schemas of the ledger routes: one source for validation, the
 * handlers' types and the API document. Names on the wire are snake_case;
 * amounts are integers in minor units of the one currency.
 */
import { Type, type Static } from 'typebox';
import { ACCOUNT_NAME_MAX, MAX_MINOR_UNITS } from '../app/ledger-service.js';

/** Tag of every ledger operation in the API document. */
export const TAG = 'ledger';

const Uuid = Type.String({ format: 'uuid', description: 'A UUIDv7.' });
const Timestamp = Type.String({ format: 'date-time', description: 'RFC 3339, UTC.' });
const AccountName = Type.String({
  minLength: 1,
  maxLength: ACCOUNT_NAME_MAX,
  description: 'A label for the owner, 1 to 100 characters, not blank, no control characters.',
});

/**
 * A number of minor units (cents, for example): an integer up to 2^53 - 1,
 * so every JSON parser reads it exactly.
 *
 * @param minimum the smallest value allowed.
 * @param description what the number is.
 * @returns the schema.
 */
function minorUnits(minimum: number, description: string) {
  return Type.Integer({ minimum, maximum: MAX_MINOR_UNITS, description });
}

/**
 * The response headers of an account answer, as a map from header name to
 * schema (the form the API document generator reads): the `ETag`, the
 * account's version in double quotes.
 */
export const AccountEtagHeaders = {
  ETag: Type.String({
    description:
      'The version of the account as a strong entity tag, e.g. "3": send it in If-Match.',
  }),
} as const;

/** The `Location` response header of a 201 answer. */
const LocationHeader = Type.String({ description: 'Where the new resource can be read.' });

/** The response headers of a new account: its ETag and where to read it. */
export const NewAccountHeaders = { ...AccountEtagHeaders, Location: LocationHeader } as const;

/** The response headers of a new transfer: where to read it. */
export const NewTransferHeaders = { Location: LocationHeader } as const;

/**
 * Request headers of `PATCH /api/v1/accounts/{id}`, declared so the API
 * document shows `If-Match`. Optional here: its absence is the use case's
 * 428, not a schema error.
 */
export const RenameAccountHeaders = Type.Object({
  'if-match': Type.Optional(
    Type.String({
      description:
        'Required: the ETag of the account as read, e.g. "3" (a list of entity tags is allowed). Missing or * is 428; a version that is no longer current is 412.',
    }),
  ),
});

/** Body of `POST /api/v1/accounts`. */
export const OpenAccountBody = Type.Object(
  {
    name: AccountName,
    opening_balance: minorUnits(0, 'The balance to open the account with, in minor units.'),
  },
  { additionalProperties: false, examples: [{ name: 'Savings', opening_balance: 10000 }] },
);
/** The parsed body of `POST /api/v1/accounts`. */
export type OpenAccountBody = Static<typeof OpenAccountBody>;

/** Body of `PATCH /api/v1/accounts/{id}`. */
export const RenameAccountBody = Type.Object(
  { name: AccountName },
  { additionalProperties: false, examples: [{ name: 'Holidays' }] },
);
/** The parsed body of `PATCH /api/v1/accounts/{id}`. */
export type RenameAccountBody = Static<typeof RenameAccountBody>;

/** An account as the API shows it. */
export const AccountSchema = Type.Object(
  {
    id: Uuid,
    name: Type.String(),
    balance: minorUnits(0, 'The current balance in minor units.'),
    version: Type.Integer({
      minimum: 1,
      description: '1 when opened, one more with every change (rename or transfer); the ETag.',
    }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { description: 'An account of the caller.' },
);

/** Path parameters of the account routes. */
export const AccountIdParams = Type.Object({ id: Uuid });

/** Body of `POST /api/v1/transfers`. */
export const CreateTransferBody = Type.Object(
  {
    from_account_id: Type.String({
      format: 'uuid',
      description: 'The account of the caller to take the amount from.',
    }),
    to_account_id: Type.String({
      format: 'uuid',
      description: 'Another account of the caller, to give the amount to.',
    }),
    amount: minorUnits(1, 'The amount to move, in minor units.'),
  },
  {
    additionalProperties: false,
    examples: [
      {
        from_account_id: '0190f2a4-1b2c-7d3e-8f40-123456789abc',
        to_account_id: '0190f2a4-1b2c-7d3e-8f40-123456789abd',
        amount: 2500,
      },
    ],
  },
);
/** The parsed body of `POST /api/v1/transfers`. */
export type CreateTransferBody = Static<typeof CreateTransferBody>;

/** A transfer as the API shows it. */
export const TransferSchema = Type.Object(
  {
    id: Uuid,
    from_account_id: Uuid,
    to_account_id: Uuid,
    amount: minorUnits(1, 'The amount moved, in minor units.'),
    created_at: Timestamp,
  },
  { description: 'A transfer between two accounts of the caller.' },
);

/** Path parameters of `GET /api/v1/transfers/{id}`. */
export const TransferIdParams = Type.Object({ id: Uuid });
