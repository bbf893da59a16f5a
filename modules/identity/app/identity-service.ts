/**
 * The identity use cases: principals, their API tokens, and the two kernel
 * ports other code relies on (authentication and the principal directory).
 * Every write runs in a unit of work; every time comes from the kernel clock.
 */
import type {
  Authenticator,
  PrincipalActor,
  PrincipalDirectory,
  PrincipalInfo,
  PrincipalKind,
} from '../../../kernel/actor/index.js';
import { principalActor } from '../../../kernel/actor/index.js';
import type { Clock } from '../../../kernel/clock/index.js';
import { codePoints, invalidField, problem } from '../../../kernel/errs/index.js';
import { newId, type Id } from '../../../kernel/ids/index.js';
import type { UnitOfWork } from '../../../kernel/txn/index.js';
import type { ApiTokenRecord, ApiTokenRepository, PrincipalRepository } from './ports.js';
import type { TokenOwnerCache } from './token-cache.js';
import { generateToken, parseToken } from './token.js';

/** Longest display name of a principal, in Unicode code points. */
export const DISPLAY_NAME_MAX = 200;
/** Longest token name, in Unicode code points. */
export const TOKEN_NAME_MAX = 100;
/** Shortest lifetime a token may be given: one minute. */
export const EXPIRES_IN_MIN_SECONDS = 60;
/** Longest lifetime a token may be given: 365 days. */
export const EXPIRES_IN_MAX_SECONDS = 31_536_000;
/** Tokens per listing page when the caller does not say. */
export const LIST_LIMIT_DEFAULT = 50;
/** Most tokens one listing page may hold. */
export const LIST_LIMIT_MAX = 100;
/** The name of the token a new principal gets. */
export const INITIAL_TOKEN_NAME = 'initial';

const KINDS: ReadonlySet<string> = new Set<PrincipalKind>(['user', 'service']);
/** C0 and C1 controls, and lone surrogates (which no UTF-8 column can hold). */
const FORBIDDEN_CHARACTERS = /[\p{Cc}\p{Cs}]/u;

/** What {@link IdentityService} is built from. */
export interface IdentityServiceDeps {
  readonly uow: UnitOfWork;
  readonly clock: Clock;
  readonly principals: PrincipalRepository;
  readonly tokens: ApiTokenRepository;
  /** Token lookups kept in process; without it every request reads api_tokens. */
  readonly tokenCache?: TokenOwnerCache;
}

/** Input of {@link IdentityService.createPrincipal}. */
export interface CreatePrincipalInput {
  /** A person (`user`) or another system (`service`). */
  readonly kind: PrincipalKind;
  /** How the principal is shown: 1 to 200 characters, no control characters. */
  readonly displayName: string;
  /** Name of the first token; {@link INITIAL_TOKEN_NAME} when absent. */
  readonly tokenName?: string;
}

/** Options of {@link IdentityService.createToken}. */
export interface CreateTokenOptions {
  /** A label for the owner: 1 to 100 characters, no control characters. */
  readonly name?: string;
  /** Lifetime in whole seconds, 60 to 31536000; the token never expires when absent. */
  readonly expiresInSeconds?: number;
  /**
   * The latest the new token may expire: the expiry of the token that asks
   * for it (a token never mints one that outlives it). The new token's
   * expiry is the earlier of this and its own lifetime.
   */
  readonly notAfter?: Date;
}

/** A token as its owner sees it in listings: never the secret, never the hash. */
export type TokenSummary = Omit<ApiTokenRecord, 'principalId'>;

/** A newly created token: the one answer that carries its secret. */
export interface IssuedToken extends Omit<TokenSummary, 'revokedAt'> {
  /** The whole token; it is not stored and cannot be shown again. */
  readonly token: string;
}

/** A principal just created, with its first token. */
export interface CreatedPrincipal {
  readonly principal: PrincipalInfo;
  readonly token: IssuedToken;
}

/** Options of {@link IdentityService.listTokens}. */
export interface ListTokensOptions {
  /** Page size, 1 to 100; default 50. */
  readonly limit?: number;
  /** The `nextCursor` of the previous page. */
  readonly cursor?: Id;
}

/** One page of a principal's tokens. */
export interface TokenList {
  /** Newest first. */
  readonly items: TokenSummary[];
  /** Pass as `cursor` for the next page; null when this page is the last. */
  readonly nextCursor: Id | null;
}

/**
 * Checks a free text a person typed. Lengths count code points, as
 * PostgreSQL's char_length and the HTTP schema's maxLength do.
 */
function checkText(value: string, max: number, pointer: string, what: string): void {
  // A UTF-16 length over twice the limit is too long without counting.
  const length = value.length > 2 * max ? max + 1 : codePoints(value);
  if (length < 1) throw invalidField(pointer, 'min_length', `${what} must not be empty.`);
  if (length > max) {
    throw invalidField(pointer, 'max_length', `${what} must be at most ${max} characters.`);
  }
  if (FORBIDDEN_CHARACTERS.test(value)) {
    throw invalidField(
      pointer,
      'invalid_characters',
      `${what} must not contain control characters.`,
    );
  }
  if (value.trim() === '') throw invalidField(pointer, 'blank', `${what} must not be blank.`);
}

function checkLifetime(seconds: number): void {
  const pointer = '#body/expires_in_seconds';
  if (!Number.isSafeInteger(seconds)) {
    throw invalidField(pointer, 'type', 'expires_in_seconds must be a whole number of seconds.');
  }
  if (seconds < EXPIRES_IN_MIN_SECONDS) {
    throw invalidField(
      pointer,
      'minimum',
      `expires_in_seconds must be at least ${EXPIRES_IN_MIN_SECONDS}.`,
    );
  }
  if (seconds > EXPIRES_IN_MAX_SECONDS) {
    throw invalidField(
      pointer,
      'maximum',
      `expires_in_seconds must be at most ${EXPIRES_IN_MAX_SECONDS}.`,
    );
  }
}

/**
 * The identity module's use cases. Implements the kernel's
 * {@link Authenticator} and {@link PrincipalDirectory} ports.
 */
export class IdentityService implements Authenticator, PrincipalDirectory {
  readonly #uow: UnitOfWork;
  readonly #clock: Clock;
  readonly #principals: PrincipalRepository;
  readonly #tokens: ApiTokenRepository;
  readonly #cache: TokenOwnerCache | undefined;

  /** @param deps the unit of work, the clock, the repositories and the token cache. */
  constructor(deps: IdentityServiceDeps) {
    this.#uow = deps.uow;
    this.#clock = deps.clock;
    this.#principals = deps.principals;
    this.#tokens = deps.tokens;
    this.#cache = deps.tokenCache;
  }

  /**
   * Creates a principal and its first token, in one transaction: a principal
   * nobody can authenticate as is never left behind.
   *
   * @param input kind, display name and the first token's name.
   * @returns the principal and the token; the token's secret is shown only here.
   * @throws AppError `validation_failed` (pointer `#body/kind`,
   *   `#body/display_name` or `#body/name`) for a bad input; nothing is written.
   */
  async createPrincipal(input: CreatePrincipalInput): Promise<CreatedPrincipal> {
    if (!KINDS.has(input.kind)) {
      throw invalidField('#body/kind', 'enum', 'kind must be "user" or "service".');
    }
    checkText(input.displayName, DISPLAY_NAME_MAX, '#body/display_name', 'display_name');
    const tokenName = input.tokenName ?? INITIAL_TOKEN_NAME;
    checkText(tokenName, TOKEN_NAME_MAX, '#body/name', 'name');
    return this.#uow.run(
      async () => {
        const now = this.#clock.now();
        const principal: PrincipalInfo = {
          id: newId(now),
          kind: input.kind,
          displayName: input.displayName,
          createdAt: now,
          disabledAt: null,
        };
        await this.#principals.insert(principal);
        const token = await this.#issue(principal.id, now, tokenName, undefined, undefined);
        return { principal, token };
      },
      { name: 'identity.createPrincipal' },
    );
  }

  /**
   * Disables a principal: none of its tokens authenticates from now on, and
   * it gets no new ones. Disabling twice keeps the first time.
   *
   * @param principalId the principal.
   * @throws AppError `not_found` when there is no such principal.
   */
  async disablePrincipal(principalId: Id): Promise<void> {
    const outer = this.#uow.inTransaction();
    await this.#uow.run(
      async () => {
        if (!(await this.#principals.disable(principalId, this.#clock.now()))) {
          throw problem('not_found', 'No such principal.');
        }
      },
      { name: 'identity.disablePrincipal' },
    );
    this.#dropCached(principalId, outer);
  }

  /**
   * Issues a new token to a principal.
   *
   * @param principalId the owner (on HTTP: the caller).
   * @param options name and lifetime.
   * @returns the token with its secret: the only time the secret is shown.
   * @throws AppError `validation_failed` for a bad name or lifetime;
   *   `not_found` when the principal does not exist or is disabled.
   */
  async createToken(principalId: Id, options: CreateTokenOptions = {}): Promise<IssuedToken> {
    const { name, expiresInSeconds, notAfter } = options;
    if (name !== undefined) checkText(name, TOKEN_NAME_MAX, '#body/name', 'name');
    if (expiresInSeconds !== undefined) checkLifetime(expiresInSeconds);
    return this.#uow.run(
      () => this.#issue(principalId, this.#clock.now(), name ?? null, expiresInSeconds, notAfter),
      { name: 'identity.createToken' },
    );
  }

  async #issue(
    principalId: Id,
    now: Date,
    name: string | null,
    expiresInSeconds: number | undefined,
    notAfter: Date | undefined,
  ): Promise<IssuedToken> {
    // Made inside the unit of work, so a retried attempt makes a fresh token.
    const generated = generateToken();
    const own =
      expiresInSeconds === undefined ? null : new Date(now.getTime() + expiresInSeconds * 1000);
    const expiresAt = notAfter === undefined || (own !== null && own <= notAfter) ? own : notAfter;
    const token = {
      id: newId(now),
      principalId,
      prefix: generated.prefix,
      name,
      createdAt: now,
      expiresAt,
    };
    if (!(await this.#tokens.insertForEnabledPrincipal({ ...token, sha256: generated.sha256 }))) {
      throw problem('not_found', 'No such principal, or it is disabled.');
    }
    return {
      id: token.id,
      token: generated.token,
      prefix: token.prefix,
      name: token.name,
      createdAt: token.createdAt,
      expiresAt: token.expiresAt,
    };
  }

  /**
   * Revokes one of the caller's tokens. Revoking a revoked token succeeds and
   * keeps the first revocation time, so a repeated request is harmless.
   *
   * @param principalId the caller; only its own tokens can be revoked.
   * @param tokenId the token.
   * @throws AppError `not_found` when the caller has no such token, worded
   *   alike whether the token is missing or someone else's, so its existence
   *   is never revealed.
   */
  async revokeToken(principalId: Id, tokenId: Id): Promise<void> {
    const outer = this.#uow.inTransaction();
    await this.#uow.run(
      async () => {
        if (!(await this.#tokens.revoke(principalId, tokenId, this.#clock.now()))) {
          throw problem('not_found', 'No such token.');
        }
      },
      { name: 'identity.revokeToken' },
    );
    this.#dropCached(principalId, outer);
  }

  /**
   * After a change to a principal's credentials: this process refuses at
   * once, the others when the trigger's notice reaches them. Inside an outer
   * unit of work the change is not committed yet, so a concurrent read would
   * still see the old rows and store them: the cache then also refuses to
   * store the principal's reads until the notice (sent on the outer commit)
   * arrives or a second passes, since the kernel port has no after-commit hook.
   */
  #dropCached(principalId: Id, outer: boolean): void {
    if (outer) this.#cache?.suppress(principalId);
    else this.#cache?.invalidatePrincipal(principalId);
  }

  /**
   * Lists a principal's tokens, newest first, revoked and expired ones
   * included, without secrets or hashes.
   *
   * @param principalId the owner (on HTTP: the caller).
   * @param options page size and the cursor from the previous page.
   * @returns one page and the cursor of the next.
   * @throws AppError `validation_failed` (pointer `#query/limit`) for a limit
   *   outside 1 to 100.
   */
  async listTokens(principalId: Id, options: ListTokensOptions = {}): Promise<TokenList> {
    const limit = options.limit ?? LIST_LIMIT_DEFAULT;
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > LIST_LIMIT_MAX) {
      throw invalidField(
        '#query/limit',
        limit > LIST_LIMIT_MAX ? 'maximum' : 'minimum',
        `limit must be a whole number from 1 to ${LIST_LIMIT_MAX}.`,
      );
    }
    const records = await this.#tokens.listByPrincipal(principalId, {
      limit,
      before: options.cursor ?? null,
    });
    const items = records.map((r): TokenSummary => ({
      id: r.id,
      prefix: r.prefix,
      name: r.name,
      createdAt: r.createdAt,
      expiresAt: r.expiresAt,
      revokedAt: r.revokedAt,
    }));
    const last = items.at(-1);
    return { items, nextCursor: items.length === limit && last ? last.id : null };
  }

  /**
   * The kernel {@link Authenticator}: resolves a bearer token.
   *
   * @param token the credential after `Bearer `, exactly as sent.
   * @param now the kernel clock's time, against which expiry is judged.
   * @returns the principal actor carrying the token's id, or null for a
   *   malformed, unknown, expired or revoked token or a disabled principal.
   */
  async authenticate(token: string, now: Date): Promise<PrincipalActor | null> {
    const parsed = parseToken(token);
    if (parsed === null) return null;
    const load = () => this.#tokens.findUsableByHash(parsed.sha256, now);
    const owner =
      this.#cache === undefined ? await load() : await this.#cache.lookup(parsed.sha256, now, load);
    if (owner === null) return null;
    return principalActor({
      principalId: owner.principalId,
      principalKind: owner.principalKind,
      tokenId: owner.tokenId,
      ...(owner.expiresAt === null ? {} : { tokenExpiresAt: owner.expiresAt }),
    });
  }

  /**
   * The kernel {@link PrincipalDirectory}: looks a principal up.
   *
   * @param id the principal's id.
   * @returns the principal (disabled ones too, with `disabledAt` set), or null.
   */
  find(id: Id): Promise<PrincipalInfo | null> {
    return this.#principals.find(id);
  }
}
