/**
 * Request and answer types of the operations the client calls, generated
 * from docs/api/openapi.json by apps/client/codegen.ts. Do not edit: run
 * `node_modules/.bin/tsx apps/client/codegen.ts` after the document changes.
 */

/** An RFC 9457 problem: the body of every error answer. */
export interface Problem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly code: string;
  readonly correlation_id: string;
  readonly [member: string]: unknown;
}

/**
 * The error statuses a key stores and replays, besides every 2xx (the
 * Idempotency-Key header's `x-stored-error-statuses`).
 */
export const STORED_ERRORS: readonly number[] = [400, 403, 404, 409, 410, 412, 413, 415, 422];

/** GET /api/v1/me (getMe): Tell who the caller is. */
export interface GetMe {
  readonly method: 'GET';
  readonly path: '/api/v1/me';
  readonly keyed: false;
  readonly responses: {
    200: {
      /** A UUIDv7. */
      readonly id: string;
      readonly kind: 'user' | 'service';
      readonly display_name: string;
    };
    401: Problem;
    404: Problem;
    429: Problem;
    500: Problem;
    503: Problem;
  };
}

/** POST /api/v1/accounts (createAccount): Open an account. */
export interface CreateAccount {
  readonly method: 'POST';
  readonly path: '/api/v1/accounts';
  readonly keyed: true;
  readonly request: {
    /** A label for the owner, 1 to 100 characters, not blank, no control characters. */
    readonly name: string;
    /** The balance to open the account with, in minor units. */
    readonly opening_balance: number;
  };
  readonly responses: {
    201: {
      /** A UUIDv7. */
      readonly id: string;
      readonly name: string;
      /** The current balance in minor units. */
      readonly balance: number;
      /** 1 when opened, one more with every change (rename or transfer); the ETag. */
      readonly version: number;
      /** RFC 3339, UTC. */
      readonly created_at: string;
      /** RFC 3339, UTC. */
      readonly updated_at: string;
    };
    400: Problem;
    401: Problem;
    409: Problem;
    422: Problem;
    429: Problem;
    500: Problem;
    503: Problem;
  };
}

/** GET /api/v1/accounts/{id} (getAccount): Read an account. */
export interface GetAccount {
  readonly method: 'GET';
  readonly path: '/api/v1/accounts/{id}';
  readonly keyed: false;
  readonly pathParams: {
    readonly id: string;
  };
  readonly responses: {
    200: {
      /** A UUIDv7. */
      readonly id: string;
      readonly name: string;
      /** The current balance in minor units. */
      readonly balance: number;
      /** 1 when opened, one more with every change (rename or transfer); the ETag. */
      readonly version: number;
      /** RFC 3339, UTC. */
      readonly created_at: string;
      /** RFC 3339, UTC. */
      readonly updated_at: string;
    };
    400: Problem;
    401: Problem;
    404: Problem;
    429: Problem;
    500: Problem;
    503: Problem;
  };
}

/** POST /api/v1/transfers (createTransfer): Move money between two accounts. */
export interface CreateTransfer {
  readonly method: 'POST';
  readonly path: '/api/v1/transfers';
  readonly keyed: true;
  readonly request: {
    /** The account of the caller to take the amount from. */
    readonly from_account_id: string;
    /** Another account of the caller, to give the amount to. */
    readonly to_account_id: string;
    /** The amount to move, in minor units. */
    readonly amount: number;
  };
  readonly responses: {
    201: {
      /** A UUIDv7. */
      readonly id: string;
      /** A UUIDv7. */
      readonly from_account_id: string;
      /** A UUIDv7. */
      readonly to_account_id: string;
      /** The amount moved, in minor units. */
      readonly amount: number;
      /** RFC 3339, UTC. */
      readonly created_at: string;
    };
    400: Problem;
    401: Problem;
    404: Problem;
    409: Problem;
    422: Problem;
    429: Problem;
    500: Problem;
    503: Problem;
  };
}

/** GET /api/v1/transfers/{id} (getTransfer): Read a transfer. */
export interface GetTransfer {
  readonly method: 'GET';
  readonly path: '/api/v1/transfers/{id}';
  readonly keyed: false;
  readonly pathParams: {
    readonly id: string;
  };
  readonly responses: {
    200: {
      /** A UUIDv7. */
      readonly id: string;
      /** A UUIDv7. */
      readonly from_account_id: string;
      /** A UUIDv7. */
      readonly to_account_id: string;
      /** The amount moved, in minor units. */
      readonly amount: number;
      /** RFC 3339, UTC. */
      readonly created_at: string;
    };
    400: Problem;
    401: Problem;
    404: Problem;
    429: Problem;
    500: Problem;
    503: Problem;
  };
}
