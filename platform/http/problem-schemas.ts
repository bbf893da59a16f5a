/**
 * Response schemas for the problems the platform's stages answer, shared by
 * every module's routes so the API document describes them once.
 */
import { Type } from 'typebox';

/** Loose schema of an RFC 9457 problem body (extension members allowed). */
export const ProblemSchema = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String(),
    code: Type.String(),
    correlation_id: Type.String(),
  },
  { additionalProperties: true, description: 'An RFC 9457 problem (application/problem+json).' },
);

/** Problems every authenticated route may answer (authentication, rate limit, failures). */
export const COMMON_PROBLEMS = {
  401: ProblemSchema,
  429: ProblemSchema,
  500: ProblemSchema,
  503: ProblemSchema,
} as const;

/**
 * Problems a keyed write may answer besides its own: a stored final error, a
 * key reused for another request, a repeat while the first runs or of a
 * one-time secret.
 */
export const KEYED_PROBLEMS = {
  ...COMMON_PROBLEMS,
  400: ProblemSchema,
  409: ProblemSchema,
  422: ProblemSchema,
} as const;
