/**
 * The identity routes under /api/v1: a principal's own API tokens and who it
 * is. Handlers return their payload or throw an AppError; they never send,
 * stream or hijack, so the idempotency stage can capture what they return.
 */
import { problem } from '../../../kernel/errs/index.js';
import { isUuidV7, parseId } from '../../../kernel/ids/index.js';
import { caller } from '../../../platform/http/caller.js';
import type { HttpServer } from '../../../platform/http/server.js';
import { KEY_LIFETIME_DOC } from '../../../platform/http/idempotency/index.js';
import type { IdentityService, IssuedToken, TokenSummary } from '../app/identity-service.js';
import {
  CreateTokenBody,
  IssuedTokenSchema,
  ListTokensQuery,
  MeSchema,
  TAG,
  TokenIdParams,
  TokenListSchema,
} from './schemas.js';
import {
  COMMON_PROBLEMS,
  KEYED_PROBLEMS,
  ProblemSchema,
} from '../../../platform/http/problem-schemas.js';

function iso(date: Date | null): string | null {
  return date === null ? null : date.toISOString();
}

function issuedBody(token: IssuedToken) {
  return {
    id: token.id,
    token: token.token,
    prefix: token.prefix,
    name: token.name,
    created_at: token.createdAt.toISOString(),
    expires_at: iso(token.expiresAt),
  };
}

function summaryBody(token: TokenSummary) {
  return {
    id: token.id,
    prefix: token.prefix,
    name: token.name,
    created_at: token.createdAt.toISOString(),
    expires_at: iso(token.expiresAt),
    revoked_at: iso(token.revokedAt),
  };
}

/**
 * Registers the identity routes on the server.
 *
 * @param app the server, with the cross-cutting stages already registered.
 * @param service the identity use cases.
 */
export function registerIdentityRoutes(app: HttpServer, service: IdentityService): void {
  app.post(
    '/api/v1/tokens',
    {
      config: { auth: 'required', idempotent: true, oneTimeSecret: true },
      schema: {
        operationId: 'createToken',
        tags: [TAG],
        summary: 'Create an API token for the caller',
        description:
          'Issues a new bearer token to the calling principal. The answer is the only time the token is shown: only its SHA-256 is stored. A repeat with the same Idempotency-Key answers 409 (reason one_time_secret) instead of showing the secret again.',
        body: CreateTokenBody,
        response: {
          201: IssuedTokenSchema,
          404: ProblemSchema,
          ...KEYED_PROBLEMS,
        },
      },
    },
    async (req, reply) => {
      const { principalId, tokenExpiresAt } = caller();
      const { name, expires_in_seconds: expiresInSeconds } = req.body;
      const issued = await service.createToken(principalId, {
        ...(name === undefined ? {} : { name }),
        ...(expiresInSeconds === undefined ? {} : { expiresInSeconds }),
        // A token never mints one that outlives it: else a stolen token
        // could outlive its own expiry through the tokens it mints.
        ...(tokenExpiresAt === undefined ? {} : { notAfter: tokenExpiresAt }),
      });
      reply.code(201);
      return issuedBody(issued);
    },
  );

  app.get(
    '/api/v1/tokens',
    {
      config: { auth: 'required' },
      schema: {
        operationId: 'listTokens',
        tags: [TAG],
        summary: "List the caller's API tokens",
        description:
          "The calling principal's tokens, newest first, revoked and expired ones included, without their secrets. Page with limit and the previous page's next_cursor.",
        querystring: ListTokensQuery,
        response: { 200: TokenListSchema, 400: ProblemSchema, ...COMMON_PROBLEMS },
      },
    },
    async (req) => {
      const { principalId } = caller();
      const { limit, cursor } = req.query;
      if (cursor !== undefined && !isUuidV7(cursor)) {
        throw problem('validation_failed', 'cursor is not a token id.', {
          errors: [{ pointer: '#query/cursor', code: 'format', detail: 'must be a UUIDv7' }],
        });
      }
      const page = await service.listTokens(principalId, {
        ...(limit === undefined ? {} : { limit }),
        ...(cursor === undefined ? {} : { cursor: parseId(cursor) }),
      });
      return { items: page.items.map(summaryBody), next_cursor: page.nextCursor };
    },
  );

  app.delete(
    '/api/v1/tokens/:id',
    {
      config: { auth: 'required', idempotent: true },
      schema: {
        operationId: 'revokeToken',
        tags: [TAG],
        summary: "Revoke one of the caller's API tokens",
        description:
          "Revokes a token of the calling principal at once; revoking it again also answers 204. A token that is not the caller's is 404, exactly as one that does not exist.",
        params: TokenIdParams,
        response: {
          204: { type: 'null', description: 'The token is revoked.' },
          404: ProblemSchema,
          ...KEYED_PROBLEMS,
        },
      },
    },
    async (req, reply) => {
      const { principalId } = caller();
      // Token ids are UUIDv7; any other uuid names no token, so it is 404
      // rather than a crash in parseId.
      if (!isUuidV7(req.params.id)) throw problem('not_found', 'No such token.');
      await service.revokeToken(principalId, parseId(req.params.id));
      reply.code(204);
      return null;
    },
  );

  app.get(
    '/api/v1/me',
    {
      // A client asks this before its first keyed write: the answer tells
      // how long the server keeps a key, as every keyed answer does.
      config: { auth: 'required', announceKeyLifetime: true },
      schema: {
        operationId: 'getMe',
        tags: [TAG],
        summary: 'Tell who the caller is',
        description:
          'The principal the bearer token stands for; the Idempotency-Key-Lifetime header tells how long the server keeps a key.',
        response: {
          200: { ...MeSchema, headers: { 'Idempotency-Key-Lifetime': KEY_LIFETIME_DOC } },
          404: ProblemSchema,
          ...COMMON_PROBLEMS,
        },
      },
    },
    async () => {
      const { principalId } = caller();
      const principal = await service.find(principalId);
      // Possible only if the principal vanished after authentication.
      if (principal === null) throw problem('not_found', 'No such principal.');
      return { id: principal.id, kind: principal.kind, display_name: principal.displayName };
    },
  );
}
