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

const unescapePointer = (segment: string): string =>
  segment.replace(/~1/g, '/').replace(/~0/g, '~');

/**
 * Turns TypeBox's findings into one entry per offending member: a missing
 * member gets `missingProperty` (as the default validator reports it), an
 * unknown member its own path, once. TypeBox reports an unknown member
 * twice: first by the `false` schema behind `additionalProperties: false`
 * (one finding per member, at the member's path), then in one
 * `additionalProperties` finding that names them all. The first kind is the
 * one kept: TypeBox stops after a budget of findings, and with more unknown
 * members than the budget the naming finding never came, so the body was
 * refused with none of them listed.
 *
 * @param errors TypeBox's findings.
 * @returns the findings for Fastify's validation error.
 */
export function toValidationErrors(
  errors: readonly TypeBoxError[],
): FastifySchemaValidationError[] {
  const out: FastifySchemaValidationError[] = [];
  const unknown = new Set<string>();
  const addUnknown = (instancePath: string, name: string, schemaPath: string): void => {
    if (unknown.has(instancePath)) return;
    unknown.add(instancePath);
    out.push({
      keyword: 'additionalProperties',
      instancePath,
      schemaPath,
      params: { additionalProperty: name },
      message: 'must not be present',
    });
  };
  for (const e of errors) {
    if (e.keyword === 'boolean' && e.schemaPath.endsWith('/additionalProperties')) {
      const slash = e.instancePath.lastIndexOf('/');
      const name = unescapePointer(e.instancePath.slice(slash + 1));
      // The object's own schema path: where the naming finding points.
      addUnknown(
        e.instancePath,
        name,
        e.schemaPath.slice(0, -'/additionalProperties'.length) || '#',
      );
      continue;
    }
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
        addUnknown(`${e.instancePath}/${escapePointer(name)}`, name, e.schemaPath);
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
