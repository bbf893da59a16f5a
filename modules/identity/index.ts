/**
 * The identity module's public face: principals, their API tokens, and the
 * kernel ports built on them (authentication and the principal directory).
 * Apps and tests import the module through this file only.
 *
 * @packageDocumentation
 */
import type { Authenticator, PrincipalDirectory, PrincipalKind } from '../../kernel/actor/index.js';
import type { Clock } from '../../kernel/clock/index.js';
import type { Id } from '../../kernel/ids/index.js';
import type { UnitOfWork } from '../../kernel/txn/index.js';
import type { ModuleDescriptor } from '../../platform/module/index.js';
import type { PgDatabase } from '../../platform/pg/uow.js';
import { PgApiTokenRepository } from './adapters/postgres/api-tokens.js';
import { PgPrincipalRepository } from './adapters/postgres/principals.js';
import { IdentityService } from './app/identity-service.js';
import {
  CREDENTIALS_CHANNEL,
  TokenOwnerCache,
  type CredentialFeed,
  type TokenCacheOptions,
} from './app/token-cache.js';
import { registerIdentityRoutes } from './http/routes.js';

/** What the identity module is built from. */
export interface IdentityDeps {
  /** The application role's database access (ambient transaction or pool). */
  readonly db: PgDatabase;
  /** The unit of work every write runs in. */
  readonly uow: UnitOfWork;
  /** Where every time (creation, expiry, revocation) comes from. */
  readonly clock: Clock;
  /**
   * Keep token lookups in process (see {@link IdentityModule.credentialFeed}):
   * TTL and size. Absent, or a TTL of 0: every request reads api_tokens.
   */
  readonly tokenCache?: TokenCacheOptions;
}

/** Input of {@link createPrincipalWithToken}, e.g. from `principal create`. */
export interface NewPrincipalInput {
  /** How the principal is shown: 1 to 200 characters, no control characters. */
  readonly displayName: string;
  /** `user` (default) or `service`; checked at run time too, for values from a command line. */
  readonly kind?: PrincipalKind;
  /** Name of the first token; `initial` when absent. */
  readonly tokenName?: string;
}

/** What {@link createPrincipalWithToken} hands back. */
export interface NewPrincipalResult {
  /** The new principal's id. */
  readonly principalId: Id;
  /** The first token's id (to revoke it later). */
  readonly tokenId: Id;
  /** The first token, in full: show it once; it is not stored and cannot be shown again. */
  readonly token: string;
}

/** The assembled identity module. */
export interface IdentityModule {
  /** What the composition root registers: name `identity` and the /api/v1 routes. */
  readonly descriptor: ModuleDescriptor;
  /** Resolves bearer tokens for the HTTP authentication stage. */
  readonly authenticator: Authenticator;
  /** Lets other modules look principals up without reading identity's tables. */
  readonly directory: PrincipalDirectory;
  /**
   * Creates a principal with a first token; see {@link createPrincipalWithToken}.
   *
   * @param input display name, kind and first token name.
   * @returns the ids and the token.
   * @throws AppError `validation_failed` naming the bad field.
   */
  createPrincipalWithToken(input: NewPrincipalInput): Promise<NewPrincipalResult>;
  /**
   * Disables a principal: its tokens stop authenticating at once. Disabling
   * twice keeps the first time.
   *
   * @param principalId the principal.
   * @throws AppError `not_found` when there is no such principal.
   */
  disablePrincipal(principalId: Id): Promise<void>;
  /** What the database listener feeds; the token cache serves only while it is live. */
  readonly credentialFeed: CredentialFeed;
}

function service(deps: IdentityDeps, tokenCache?: TokenOwnerCache): IdentityService {
  return new IdentityService({
    uow: deps.uow,
    clock: deps.clock,
    principals: new PgPrincipalRepository(deps.db),
    tokens: new PgApiTokenRepository(deps.db),
    ...(tokenCache === undefined ? {} : { tokenCache }),
  });
}

async function createWith(
  identity: IdentityService,
  input: NewPrincipalInput,
): Promise<NewPrincipalResult> {
  const created = await identity.createPrincipal({
    kind: input.kind ?? 'user',
    displayName: input.displayName,
    ...(input.tokenName === undefined ? {} : { tokenName: input.tokenName }),
  });
  return {
    principalId: created.principal.id,
    tokenId: created.token.id,
    token: created.token.token,
  };
}

/**
 * Creates a principal and its first API token in one transaction: what the
 * CLI command `principal create --name X [--kind service]` runs, since no
 * principal exists to call the HTTP API before the first one is made.
 *
 * @param deps database, unit of work and clock.
 * @param input display name, kind (default `user`) and first token name.
 * @returns the principal's id, the token's id and the token itself.
 * @throws AppError `validation_failed` with a `#body/<field>` pointer
 *   (`kind`, `display_name`, `name`) and a detail fit to print; nothing is
 *   written then.
 * @example
 * const { principalId, token } = await createPrincipalWithToken(deps, {
 *   displayName: 'Nightly export',
 *   kind: 'service',
 * });
 */
export function createPrincipalWithToken(
  deps: IdentityDeps,
  input: NewPrincipalInput,
): Promise<NewPrincipalResult> {
  return createWith(service(deps), input);
}

/**
 * Assembles the identity module over PostgreSQL.
 *
 * @param deps database, unit of work and clock.
 * @returns the module descriptor, the two kernel ports it implements and the
 *   operator actions of the CLI.
 */
export function createIdentityModule(deps: IdentityDeps): IdentityModule {
  const cache =
    deps.tokenCache === undefined || deps.tokenCache.ttlMs === 0
      ? undefined
      : new TokenOwnerCache(deps.tokenCache);
  const identity = service(deps, cache);
  return {
    descriptor: {
      name: 'identity',
      routes: (app) => {
        registerIdentityRoutes(app, identity);
      },
    },
    // Each port exposes only its own method, not the whole service, and keeps
    // working when a caller passes the method around without its object.
    authenticator: { authenticate: (token, now) => identity.authenticate(token, now) },
    directory: { find: (id) => identity.find(id) },
    createPrincipalWithToken: (input) => createWith(identity, input),
    disablePrincipal: (principalId) => identity.disablePrincipal(principalId),
    credentialFeed: {
      channel: CREDENTIALS_CHANNEL,
      notify: (payload) => cache?.notice(payload),
      setLive: (live) => cache?.setLive(live),
    },
  };
}
export {
  CREDENTIALS_CHANNEL,
  type CredentialFeed,
  type TokenCacheOptions,
} from './app/token-cache.js';
export {
  startCredentialListener,
  type CredentialListenerOptions,
} from './adapters/postgres/credential-listener.js';
