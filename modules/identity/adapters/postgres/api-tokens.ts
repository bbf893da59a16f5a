/**
 * The `api_tokens` table over postgres.js. Tokens are found by the SHA-256 of
 * the whole token (a unique index); the secret itself never reaches SQL.
 */
import type { PrincipalKind } from '../../../../kernel/actor/index.js';
import { parseId, type Id } from '../../../../kernel/ids/index.js';
import type { PgDatabase } from '../../../../platform/pg/uow.js';
import type {
  ApiTokenRecord,
  ApiTokenRepository,
  NewApiToken,
  TokenOwner,
} from '../../app/ports.js';

interface TokenRow {
  readonly id: string;
  readonly principal_id: string;
  readonly prefix: string;
  readonly name: string | null;
  readonly created_at: Date;
  readonly expires_at: Date | null;
  readonly revoked_at: Date | null;
}

interface OwnerRow {
  readonly token_id: string;
  readonly principal_id: string;
  readonly kind: PrincipalKind;
  readonly expires_at: Date | null;
}

/** {@link ApiTokenRepository} over PostgreSQL. */
export class PgApiTokenRepository implements ApiTokenRepository {
  readonly #db: PgDatabase;

  /** @param db the database; writes join the ambient unit of work. */
  constructor(db: PgDatabase) {
    this.#db = db;
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async insertForEnabledPrincipal(token: NewApiToken): Promise<boolean> {
    // One statement checks the principal and inserts, so no enabled-check
    // result can go stale between two round trips. The casts type the
    // parameters, which a SELECT list would otherwise resolve as text.
    const rows = await this.#db.tx('creating an API token')`
      insert into api_tokens (id, principal_id, secret_sha256, prefix, name, created_at, expires_at)
      select ${token.id}::uuid, p.id, ${token.sha256}::bytea, ${token.prefix}::text,
             ${token.name}::text, ${token.createdAt}::timestamptz, ${token.expiresAt}::timestamptz
        from principals p
       where p.id = ${token.principalId} and p.disabled_at is null
      returning id`;
    return rows.length > 0;
  }

  /** @inheritdoc */
  async findUsableByHash(sha256: Buffer, now: Date): Promise<TokenOwner | null> {
    const [row] = await this.#db.sql()<OwnerRow[]>`
      select t.id as token_id, p.id as principal_id, p.kind, t.expires_at
        from api_tokens t
        join principals p on p.id = t.principal_id
       where t.secret_sha256 = ${sha256}
         and t.revoked_at is null
         and (t.expires_at is null or t.expires_at > ${now})
         and p.disabled_at is null`;
    if (row === undefined) return null;
    return {
      tokenId: parseId(row.token_id),
      principalId: parseId(row.principal_id),
      principalKind: row.kind,
      expiresAt: row.expires_at,
    };
  }

  /**
   * @inheritdoc
   * @throws TransactionRequiredError outside a unit of work.
   */
  async revoke(principalId: Id, tokenId: Id, at: Date): Promise<boolean> {
    const rows = await this.#db.tx('revoking an API token')`
      update api_tokens
         set revoked_at = coalesce(revoked_at, ${at})
       where id = ${tokenId} and principal_id = ${principalId}
      returning id`;
    return rows.length > 0;
  }

  /** @inheritdoc */
  async listByPrincipal(
    principalId: Id,
    page: { readonly limit: number; readonly before: Id | null },
  ): Promise<ApiTokenRecord[]> {
    const sql = this.#db.sql();
    const rows = await sql<TokenRow[]>`
      select id, principal_id, prefix, name, created_at, expires_at, revoked_at
        from api_tokens
       where principal_id = ${principalId}
         ${page.before === null ? sql`` : sql`and id < ${page.before}`}
       order by id desc
       limit ${page.limit}`;
    return rows.map((row) => ({
      id: parseId(row.id),
      principalId: parseId(row.principal_id),
      prefix: row.prefix,
      name: row.name,
      createdAt: row.created_at,
      expiresAt: row.expires_at,
      revokedAt: row.revoked_at,
    }));
  }
}
