/**
 * Strict request validation for the ledger routes. Fastify's default
 * validator coerces types (`"10"`, `true` and `null` pass an integer schema
 * as 10, 1 and 0) and drops unknown members silently: harmless for a label,
 * wrong for money. These routes are validated by TypeBox's own compiler
 * instead, which checks the value exactly as sent, and its findings are
 * shaped like the default validator's, so the error handler names each
 * offending member the same way (`#body/amount`, `#body/name`).
 */
import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify';
import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';

/** One finding of TypeBox's compiler, as it reports it. */
interface TypeBoxError {
  readonly keyword: string;
  readonly schemaPath: string;
  readonly instancePath: string;
  readonly params: Record<string, unknown>;
  readonly message: string;
}

const escapePointer = (name: string): string => name.replace(/~/g, '~0').replace(/\//g, '~1');

function names(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

/**
 * Turns TypeBox's findings into one entry per offending member: a missing
 * member gets `missingProperty` (as the default validator reports it), an
 * unknown member its own path, and the `false` schema behind
 * `additionalProperties: false` is left out, since its `additionalProperties`
 * entry says the same.
 *
 * @param errors TypeBox's findings.
 * @returns the findings for Fastify's validation error.
 */
export function toValidationErrors(
  errors: readonly TypeBoxError[],
): FastifySchemaValidationError[] {
  const out: FastifySchemaValidationError[] = [];
  for (const e of errors) {
    if (e.keyword === 'boolean' && e.schemaPath.endsWith('/additionalProperties')) continue;
    if (e.keyword === 'required') {
      for (const name of names(e.params['requiredProperties'])) {
        out.push({
          keyword: 'required',
          instancePath: e.instancePath,
          schemaPath: e.schemaPath,
          params: { missingProperty: name },
          message: `must have required property '${name}'`,
        });
      }
      continue;
    }
    if (e.keyword === 'additionalProperties') {
      for (const name of names(e.params['additionalProperties'])) {
        out.push({
          keyword: 'additionalProperties',
          instancePath: `${e.instancePath}/${escapePointer(name)}`,
          schemaPath: e.schemaPath,
          params: { additionalProperty: name },
          message: 'must not be present',
        });
      }
      continue;
    }
    out.push({
      keyword: e.keyword,
      instancePath: e.instancePath,
      schemaPath: e.schemaPath,
      params: e.params,
      message: e.message,
    });
  }
  return out;
}

/**
 * A route-level `validatorCompiler` that checks each part of the request
 * against its TypeBox schema without coercing or removing anything. Suits
 * parts whose values are JSON (the body) or strings (path parameters).
 *
 * @param route the schema of one part of a route.
 * @returns the part's validator: the value unchanged, or the findings.
 */
export const strictValidatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema }) => {
  const check = Compile(schema);
  return (value: unknown) => {
    if (check.Check(value)) return { value };
    return { error: toValidationErrors(check.Errors(value)) };
  };
};
