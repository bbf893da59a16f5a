/**
 * Actors: who is making the current request.
 *
 * @packageDocumentation
 */
export type {
  Actor,
  AnonymousActor,
  PrincipalActor,
  PrincipalActorInit,
  PrincipalKind,
} from './actor.js';
export { anonymous, isPrincipal, principalActor } from './actor.js';
export type { Authenticator, PrincipalDirectory, PrincipalInfo } from './ports.js';
