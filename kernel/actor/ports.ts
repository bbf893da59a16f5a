import type { Id } from '../ids/index.js';
import type { PrincipalActor, PrincipalKind } from './actor.js';

/**
 * Resolves a bearer credential to the principal it stands for. The HTTP
 * authentication stage depends on this port only; the identity module
 * implements it over its tables.
 */
export interface Authenticator {
  /**
   * Looks a bearer token up.
   *
   * @param token the credential after `Bearer `, exactly as sent.
   * @param now the kernel clock's time, against which expiry is judged.
   * @returns the actor for a valid, unexpired, unrevoked token of an enabled
   *   principal; null for anything else (unknown, malformed, expired,
   *   revoked, disabled), so the caller answers 401 without telling which.
   */
  authenticate(token: string, now: Date): Promise<PrincipalActor | null>;
}

/** What other modules may know about a principal. */
export interface PrincipalInfo {
  readonly id: Id;
  readonly kind: PrincipalKind;
  readonly displayName: string;
  readonly createdAt: Date;
  readonly disabledAt: Date | null;
}

/**
 * Looks principals up for modules that need to know about them without
 * reading the identity module's tables.
 */
export interface PrincipalDirectory {
  /**
   * @param id the principal's id.
   * @returns the principal, or null when there is none.
   */
  find(id: Id): Promise<PrincipalInfo | null>;
}
