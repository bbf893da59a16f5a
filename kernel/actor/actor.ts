import type { Id } from '../ids/index.js';

/** What kind of principal acts: a person, or another system. */
export type PrincipalKind = 'user' | 'service';

/** A caller that presented no credentials (on `auth: optional` or `none` routes). */
export interface AnonymousActor {
  readonly kind: 'anonymous';
}

/** An authenticated caller. */
export interface PrincipalActor {
  readonly kind: 'principal';
  /** The principal that acts: what authorization and idempotency keys are scoped by. */
  readonly principalId: Id;
  /** Whether the principal is a person or another system. */
  readonly principalKind: PrincipalKind;
  /** The API token that authenticated this request, when one did. */
  readonly tokenId?: Id;
  /**
   * When that token expires, when it does: what the token may do ends
   * then, so nothing it makes (a new token) may outlive it.
   */
  readonly tokenExpiresAt?: Date;
}

/**
 * Who is making the current request. Held in the request context and set by
 * the authentication stage; use cases read it, never a header.
 */
export type Actor = AnonymousActor | PrincipalActor;

/** The one anonymous actor. Frozen, since every anonymous request shares it. */
export const anonymous: AnonymousActor = Object.freeze({ kind: 'anonymous' });

const principalKinds: ReadonlySet<string> = new Set<PrincipalKind>(['user', 'service']);

/** The members of a {@link PrincipalActor} a caller supplies. */
export interface PrincipalActorInit {
  readonly principalId: Id;
  readonly principalKind: PrincipalKind;
  readonly tokenId?: Id;
  readonly tokenExpiresAt?: Date;
}

/**
 * Builds the actor of an authenticated principal. Named members rather than
 * positional ones, because the two ids have the same type and could be swapped
 * unnoticed.
 *
 * @param init - the principal's id and kind, and the authenticating token's id
 *   when there is one.
 * @returns a frozen actor; `tokenId` and `tokenExpiresAt` are absent when not given.
 * @throws {TypeError} when `principalKind` is neither `user` nor `service`
 *   (possible only when the value comes from outside the type system).
 */
export function principalActor(init: PrincipalActorInit): PrincipalActor {
  const { principalId, principalKind, tokenId, tokenExpiresAt } = init;
  if (!principalKinds.has(principalKind)) {
    throw new TypeError(`unknown principal kind ${JSON.stringify(principalKind)}`);
  }
  return Object.freeze({
    kind: 'principal',
    principalId,
    principalKind,
    ...(tokenId === undefined ? {} : { tokenId }),
    ...(tokenExpiresAt === undefined ? {} : { tokenExpiresAt }),
  });
}

/**
 * Tells whether an actor is an authenticated principal.
 *
 * @param actor - the actor to test.
 * @returns true, narrowing the type, when the actor is a principal.
 */
export function isPrincipal(actor: Actor): actor is PrincipalActor {
  return actor.kind === 'principal';
}
