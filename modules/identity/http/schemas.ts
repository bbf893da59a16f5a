/**
 * TypeBox schemas of the identity routes: one source for validation, the
 * handlers' types and the API document. Names on the wire are snake_case.
 */
import { Type, type Static } from 'typebox';
import {
  EXPIRES_IN_MAX_SECONDS,
  EXPIRES_IN_MIN_SECONDS,
  LIST_LIMIT_DEFAULT,
  LIST_LIMIT_MAX,
  TOKEN_NAME_MAX,
} from '../app/identity-service.js';
import { TOKEN_PATTERN_DESCRIPTION } from '../app/token.js';

/** Tag of every identity operation in the API document. */
export const TAG = 'identity';

const Uuid = Type.String({ format: 'uuid', description: 'A UUIDv7.' });
const Timestamp = Type.String({ format: 'date-time', description: 'RFC 3339, UTC.' });
const NullableTimestamp = Type.Union([Timestamp, Type.Null()]);
const TokenName = Type.String({
  minLength: 1,
  maxLength: TOKEN_NAME_MAX,
  description: 'A label for the owner, 1 to 100 characters, no control characters.',
});
const Prefix = Type.String({
  pattern: '^tok_[a-z2-7]{8}$',
  description: 'The public start of the token, to tell tokens apart.',
  examples: ['tok_k3vq7za2'],
});

/** Body of `POST /api/v1/tokens`. */
export const CreateTokenBody = Type.Object(
  {
    name: Type.Optional(TokenName),
    expires_in_seconds: Type.Optional(
      Type.Integer({
        minimum: EXPIRES_IN_MIN_SECONDS,
        maximum: EXPIRES_IN_MAX_SECONDS,
        description:
          "Lifetime in seconds (60 to 31536000); without it the token never expires. A token never outlives the token that creates it: its expiry is at most the caller token's.",
      }),
    ),
  },
  {
    additionalProperties: false,
    examples: [{ name: 'deploy script', expires_in_seconds: 86400 }],
  },
);
/** The parsed body of `POST /api/v1/tokens`. */
export type CreateTokenBody = Static<typeof CreateTokenBody>;

/** Answer of `POST /api/v1/tokens`: the only one that carries the secret. */
export const IssuedTokenSchema = Type.Object(
  {
    id: Uuid,
    token: Type.String({
      description: `The whole token (${TOKEN_PATTERN_DESCRIPTION}). Shown once: it is not stored and cannot be read again.`,
    }),
    prefix: Prefix,
    name: Type.Union([Type.String(), Type.Null()]),
    created_at: Timestamp,
    expires_at: NullableTimestamp,
  },
  { description: 'The new token, with its secret.' },
);

/** One token in a listing: never the secret. */
export const TokenSummarySchema = Type.Object({
  id: Uuid,
  prefix: Prefix,
  name: Type.Union([Type.String(), Type.Null()]),
  created_at: Timestamp,
  expires_at: NullableTimestamp,
  revoked_at: NullableTimestamp,
});

/** Query of `GET /api/v1/tokens`. */
export const ListTokensQuery = Type.Object({
  limit: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: LIST_LIMIT_MAX,
      // Not a schema default: Fastify would fill it in, and the use case
      // already owns the default.
      description: `Tokens per page, 1 to 100; ${String(LIST_LIMIT_DEFAULT)} when absent.`,
    }),
  ),
  cursor: Type.Optional(
    Type.String({ format: 'uuid', description: 'The next_cursor of the previous page.' }),
  ),
});

/** Answer of `GET /api/v1/tokens`. */
export const TokenListSchema = Type.Object({
  items: Type.Array(TokenSummarySchema, { description: 'Newest first.' }),
  next_cursor: Type.Union([Uuid, Type.Null()], {
    description: 'Pass as cursor for the next page; null on the last page.',
  }),
});

/** Path parameters of `DELETE /api/v1/tokens/{id}`. */
export const TokenIdParams = Type.Object({ id: Uuid });

/** Answer of `GET /api/v1/me`. */
export const MeSchema = Type.Object({
  id: Uuid,
  kind: Type.Union([Type.Literal('user'), Type.Literal('service')]),
  display_name: Type.String(),
});
