/**
 * The storage the identity use cases need, as interfaces the adapters
 * implement (adapters/postgres). The use cases never see a table name.
 */
import type { PrincipalInfo, PrincipalKind } from '../../../kernel/actor/index.js';
import type { Id } from '../../../kernel/ids/index.js';

/** A principal about to be stored. */
export interface NewPrincipal {
  readonly id: Id;
  readonly kind: PrincipalKind;
  readonly displayName: string;
  readonly createdAt: Date;
}

/** Where principals live. */
export interface PrincipalRepository {
  /**
   * Stores a new, enabled principal.
   *
   * @param principal the principal.
   * @throws the driver's error when the id exists or a constraint fails.
   */
  insert(principal: NewPrincipal): Promise<void>;
  /**
   * Reads a principal.
   *
   * @param id the principal's id.
   * @returns the principal, disabled or not, or null when there is none.
   */
  find(id: Id): Promise<PrincipalInfo | null>;
  /**
   * Disables a principal, keeping the first time it was disabled.
   *
   * @param id the principal's id.
   * @param at when, from the kernel clock.
   * @returns false when there is no such principal.
   */
  disable(id: Id, at: Date): Promise<boolean>;
}

/** An API token as its owner may see it: everything but the hash. */
export interface ApiTokenRecord {
  readonly id: Id;
  readonly principalId: Id;
  /** The public prefix, e.g. `tok_abcd2345`. */
  readonly prefix: string;
  readonly name: string | null;
  readonly createdAt: Date;
  readonly expiresAt: Date | null;
  readonly revokedAt: Date | null;
}

/** A token about to be stored: its record and the SHA-256 of the whole token. */
export interface NewApiToken extends Omit<ApiTokenRecord, 'revokedAt'> {
  /** 32 bytes. */
  readonly sha256: Buffer;
}

/** Whom a token stands for, as authentication needs it. */
export interface TokenOwner {
  readonly tokenId: Id;
  readonly principalId: Id;
  readonly principalKind: PrincipalKind;
  /** When the token expires, or null when it does not. */
  readonly expiresAt: Date | null;
}

/** Where API tokens live. */
export interface ApiTokenRepository {
  /**
   * Stores a token for a principal that exists and is not disabled.
   *
   * @param token the token's record and hash.
   * @returns false, storing nothing, when the principal is missing or disabled.
   */
  insertForEnabledPrincipal(token: NewApiToken): Promise<boolean>;
  /**
   * Finds the owner of a token that is usable at a given time: the hash is
   * known, the token is neither revoked nor expired (`expires_at > now`), and
   * its principal is not disabled.
   *
   * @param sha256 SHA-256 of the whole presented token.
   * @param now the kernel clock's time.
   * @returns the owner, or null.
   */
  findUsableByHash(sha256: Buffer, now: Date): Promise<TokenOwner | null>;
  /**
   * Revokes a token of a principal, keeping the first revocation time.
   *
   * @param principalId the owner; a token of anyone else is left alone.
   * @param tokenId the token.
   * @param at when, from the kernel clock.
   * @returns false when the principal has no such token.
   */
  revoke(principalId: Id, tokenId: Id, at: Date): Promise<boolean>;
  /**
   * Lists a principal's tokens, newest first (by id, which is a UUIDv7).
   *
   * @param principalId the owner.
   * @param page at most `limit` tokens with ids below `before` (all when null).
   * @returns the tokens, revoked and expired ones included.
   */
  listByPrincipal(
    principalId: Id,
    page: { readonly limit: number; readonly before: Id | null },
  ): Promise<ApiTokenRecord[]>;
}
