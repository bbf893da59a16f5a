/**
 * Generates the client's request and answer types (apps/client/api-types.ts)
 * from the API document the server generates (docs/api/openapi.json), so the
 * types are written once, by the routes' TypeBox schemas, and reach the
 * client through the published contract rather than the server's code.
 *
 * Run it after `make docs` changed the document:
 * `node_modules/.bin/tsx apps/client/codegen.ts` (writes the file) or
 * `... --check` (exit 1 when the file is stale). codegen.test.ts fails when
 * the committed file is not what this makes of the committed document.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The operations the client calls, by operationId. */
export const CLIENT_OPERATIONS: readonly string[] = [
  'getMe',
  'createAccount',
  'getAccount',
  'createTransfer',
  'getTransfer',
];

/**
 * The extension of a keyed operation's Idempotency-Key header schema that
 * lists the error statuses the server stores under a key (the server's
 * platform/http/idempotency/openapi.ts writes it; the client may import
 * nothing of the server, so the name is written here again).
 */
export const STORED_ERRORS_EXTENSION = 'x-stored-error-statuses';

/** The API document, from the repository root. */
export const DOCUMENT_FILE = 'docs/api/openapi.json';
/** The generated file, from the repository root. */
export const TYPES_FILE = 'apps/client/api-types.ts';

type Json = Record<string, unknown>;

const HTTP_METHODS = ['get', 'put', 'post', 'patch', 'delete'];

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function pascal(id: string): string {
  return id.charAt(0).toUpperCase() + id.slice(1);
}

function literal(v: unknown): string {
  return typeof v === 'string' ? `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'` : String(v);
}

function comment(text: unknown, indent: string): string {
  if (typeof text !== 'string' || text === '') return '';
  return `${indent}/** ${text.replace(/\*\//g, '*\\/')} */\n`;
}

/** Where a schema sits, for the error naming a schema the generator cannot type. */
type Where = string;

function typeOf(schema: unknown, indent: string, where: Where): string {
  if (!isObject(schema)) throw new Error(`${where}: cannot type a schema that is not an object`);
  const alternatives = schema['anyOf'] ?? schema['oneOf'];
  if (alternatives !== undefined) {
    if (!Array.isArray(alternatives) || alternatives.length === 0) {
      throw new Error(`${where}: cannot type an empty anyOf or oneOf`);
    }
    return [...new Set(alternatives.map((s) => typeOf(s, indent, where)))].join(' | ');
  }
  if ('const' in schema) return literal(schema['const']);
  const values = schema['enum'];
  if (Array.isArray(values)) return values.map(literal).join(' | ');
  switch (schema['type']) {
    case 'string':
      return 'string';
    case 'integer':
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array':
      return `readonly ${wrap(typeOf(schema['items'] ?? {}, indent, where))}[]`;
    case 'object':
      return objectType(schema, indent, where);
    case undefined:
      if (Object.keys(schema).every((k) => k === 'description' || k === 'examples')) {
        return 'unknown';
      }
  }
  throw new Error(`${where}: cannot type ${JSON.stringify(schema)}`);
}

function wrap(type: string): string {
  return type.includes(' ') ? `(${type})` : type;
}

function objectType(schema: Json, indent: string, where: Where): string {
  const properties = isObject(schema['properties']) ? schema['properties'] : {};
  const required = new Set(Array.isArray(schema['required']) ? schema['required'] : []);
  const inner = `${indent}  `;
  const lines: string[] = [];
  for (const [name, member] of Object.entries(properties)) {
    const optional = required.has(name) ? '' : '?';
    const description = isObject(member) ? member['description'] : undefined;
    lines.push(
      `${comment(description, inner)}${inner}readonly ${name}${optional}: ${typeOf(member, inner, `${where} ${name}`)};\n`,
    );
  }
  if (schema['additionalProperties'] === true)
    lines.push(`${inner}readonly [member: string]: unknown;\n`);
  if (lines.length === 0) return '{}';
  return `{\n${lines.join('')}${indent}}`;
}

function jsonSchemaOf(content: unknown): unknown {
  if (!isObject(content)) return undefined;
  const media = content['application/json'] ?? content['application/problem+json'];
  return isObject(media) ? media['schema'] : undefined;
}

interface Operation {
  readonly id: string;
  readonly method: string;
  readonly path: string;
  readonly op: Json;
}

function operations(document: unknown): Map<string, Operation> {
  if (!isObject(document) || !isObject(document['paths'])) {
    throw new Error('the input is not an OpenAPI document (no paths object)');
  }
  const found = new Map<string, Operation>();
  for (const [p, item] of Object.entries(document['paths'])) {
    if (!isObject(item)) continue;
    for (const method of HTTP_METHODS) {
      const op = item[method];
      if (isObject(op) && typeof op['operationId'] === 'string') {
        found.set(op['operationId'], { id: op['operationId'], method, path: p, op });
      }
    }
  }
  return found;
}

/**
 * Makes the TypeScript source of the types: one interface per operation
 * (method, path, whether it takes an Idempotency-Key, path parameters, the
 * request body, the answer body per status) and `Problem`, the one schema of
 * the error answers, and `STORED_ERRORS`, the error statuses
 * a key stores.
 *
 * @param document the parsed API document.
 * @param wanted the operationIds to type; default {@link CLIENT_OPERATIONS}.
 * @returns the file's text, formatted as Prettier formats it.
 * @throws Error naming an operation missing from the document, a keyed
 *   operation without the stored statuses or with another list than the
 *   others, or the place
 *   of a schema outside the subset it types (object, array, string,
 *   integer, number, boolean, null, enum, const, anyOf, oneOf).
 */
export function generateTypes(
  document: unknown,
  wanted: readonly string[] = CLIENT_OPERATIONS,
): string {
  const all = operations(document);
  // The error statuses a key stores, which every keyed operation's
  // Idempotency-Key header lists alike.
  let stored: { readonly list: string; readonly from: string } | undefined;
  let problem: string | undefined;
  let problemSource: string | undefined;
  const blocks: string[] = [];
  for (const id of wanted) {
    const found = all.get(id);
    if (found === undefined) throw new Error(`operation ${id} is not in the document`);
    const { op, method, path: p } = found;
    const parameters = Array.isArray(op['parameters']) ? op['parameters'].filter(isObject) : [];
    const keyHeader = parameters.find(
      (x) => x['in'] === 'header' && x['name'] === 'Idempotency-Key',
    );
    const keyed = keyHeader !== undefined;
    if (keyHeader !== undefined) {
      const statuses = isObject(keyHeader['schema'])
        ? keyHeader['schema'][STORED_ERRORS_EXTENSION]
        : undefined;
      if (
        !Array.isArray(statuses) ||
        statuses.length === 0 ||
        !statuses.every((n) => Number.isInteger(n) && (n as number) >= 400 && (n as number) <= 499)
      ) {
        throw new Error(
          `${id}: its Idempotency-Key header has no ${STORED_ERRORS_EXTENSION} (a list of 4xx statuses)`,
        );
      }
      const list = JSON.stringify([...(statuses as number[])].sort((a, b) => a - b));
      if (stored !== undefined && stored.list !== list) {
        throw new Error(
          `${id} and ${stored.from} list other ${STORED_ERRORS_EXTENSION}: ${list} and ${stored.list}`,
        );
      }
      stored ??= { list, from: id };
    }
    const pathParams = parameters.filter((x) => x['in'] === 'path');
    const summary = typeof op['summary'] === 'string' ? `: ${op['summary']}.` : '.';
    let block = `/** ${method.toUpperCase()} ${p} (${id})${summary} */\n`;
    block += `export interface ${pascal(id)} {\n`;
    block += `  readonly method: '${method.toUpperCase()}';\n`;
    block += `  readonly path: '${p}';\n`;
    block += `  readonly keyed: ${String(keyed)};\n`;
    if (pathParams.length > 0) {
      block += `  readonly pathParams: {\n`;
      for (const x of pathParams) {
        block += `    readonly ${String(x['name'])}: ${typeOf(x['schema'], '    ', `${id} path ${String(x['name'])}`)};\n`;
      }
      block += `  };\n`;
    }
    const body = isObject(op['requestBody'])
      ? jsonSchemaOf(op['requestBody']['content'])
      : undefined;
    if (body !== undefined)
      block += `  readonly request: ${typeOf(body, '  ', `${id} request`)};\n`;
    block += `  readonly responses: {\n`;
    const responses = isObject(op['responses']) ? op['responses'] : {};
    for (const [status, answer] of Object.entries(responses)) {
      const schema = isObject(answer) ? jsonSchemaOf(answer['content']) : undefined;
      const where = `${id} ${status}`;
      let type: string;
      if (schema === undefined) type = 'null';
      else if (Number(status) >= 400) {
        const source = JSON.stringify(schema);
        if (problem === undefined) {
          problem = typeOf(schema, '', where);
          problemSource = source;
        }
        type = source === problemSource ? 'Problem' : typeOf(schema, '    ', where);
      } else type = typeOf(schema, '    ', where);
      block += `    ${status}: ${type};\n`;
    }
    block += `  };\n}\n`;
    blocks.push(block);
  }
  const header =
    `/**\n` +
    ` * Request and answer types of the operations the client calls, generated\n` +
    ` * from ${DOCUMENT_FILE} by apps/client/codegen.ts. Do not edit: run\n` +
    ` * \`node_modules/.bin/tsx apps/client/codegen.ts\` after the document changes.\n` +
    ` */\n`;
  const problemBlock =
    problem === undefined
      ? ''
      : `\n/** An RFC 9457 problem: the body of every error answer. */\nexport interface Problem ${problem}\n`;
  const storedBlock =
    stored === undefined
      ? ''
      : `\n/**\n * The error statuses a key stores and replays, besides every 2xx (the\n * Idempotency-Key header's \`${STORED_ERRORS_EXTENSION}\`).\n */\nexport const STORED_ERRORS: readonly number[] = ${stored.list.replace(/,/g, ', ')};\n`;
  return `${header}${problemBlock}${storedBlock}${blocks.map((b) => `\n${b}`).join('')}`;
}

async function main(argv: readonly string[]): Promise<number> {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
  const document = JSON.parse(await fs.readFile(path.join(root, DOCUMENT_FILE), 'utf8')) as unknown;
  const text = generateTypes(document);
  const target = path.join(root, TYPES_FILE);
  if (argv.includes('--check')) {
    const current = await fs.readFile(target, 'utf8').catch(() => '');
    if (current === text) return 0;
    process.stderr.write(
      `${TYPES_FILE} is stale: run node_modules/.bin/tsx apps/client/codegen.ts\n`,
    );
    return 1;
  }
  await fs.writeFile(target, text);
  process.stdout.write(`wrote ${TYPES_FILE}\n`);
  return 0;
}

if (
  process.argv[1] !== undefined &&
  path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)
) {
  process.exitCode = await main(process.argv.slice(2));
}
