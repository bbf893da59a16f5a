/**
 * The client's types come from the API document: the checked-in
 * api-types.ts is exactly what the generator makes of docs/api/openapi.json
 * (so a route change that regenerates the document without the types fails
 * here), and the generator's rules on a small document of its own.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { CLIENT_OPERATIONS, generateTypes, TYPES_FILE, DOCUMENT_FILE } from './codegen.js';

const root = path.resolve(import.meta.dirname, '../..');

void t.test('api-types.ts is current with docs/api/openapi.json', async (t) => {
  const document = JSON.parse(await fs.readFile(path.join(root, DOCUMENT_FILE), 'utf8')) as unknown;
  const committed = await fs.readFile(path.join(root, TYPES_FILE), 'utf8');
  t.equal(
    committed,
    generateTypes(document),
    `${TYPES_FILE} is stale: run node_modules/.bin/tsx apps/client/codegen.ts`,
  );
  t.same([...CLIENT_OPERATIONS].sort(), [
    'createAccount',
    'createTransfer',
    'getAccount',
    'getMe',
    'getTransfer',
  ]);
});

const problem = {
  type: 'object',
  required: ['type', 'code'],
  properties: { type: { type: 'string' }, code: { type: 'string' } },
  additionalProperties: true,
};

const small = {
  openapi: '3.0.3',
  paths: {
    '/api/v1/things/{id}': {
      put: {
        operationId: 'putThing',
        summary: 'Put a thing',
        parameters: [
          { in: 'path', name: 'id', required: true, schema: { type: 'string' } },
          {
            in: 'header',
            name: 'Idempotency-Key',
            required: true,
            schema: { type: 'string', 'x-stored-error-statuses': [422, 400] },
          },
        ],
        requestBody: {
          content: {
            'application/json': {
              schema: {
                type: 'object',
                required: ['name'],
                properties: {
                  name: { type: 'string', description: 'Its name.' },
                  tags: { type: 'array', items: { type: 'string' } },
                  size: { anyOf: [{ type: 'integer' }, { type: 'null' }] },
                  kind: { type: 'string', enum: ['a', 'b'] },
                  flag: { type: 'boolean' },
                  fixed: { const: 3 },
                },
                additionalProperties: false,
              },
            },
          },
        },
        responses: {
          '200': {
            content: { 'application/json': { schema: { type: 'object', properties: {} } } },
          },
          '204': { description: 'nothing' },
          '404': { content: { 'application/json': { schema: problem } } },
          '409': { content: { 'application/json': { schema: problem } } },
        },
      },
    },
  },
};

void t.test('the generator maps the JSON Schema subset the API uses', (t) => {
  const out = generateTypes(small, ['putThing']);
  t.match(out, /export interface PutThing \{/);
  t.match(out, /readonly method: 'PUT';/);
  t.match(out, /readonly path: '\/api\/v1\/things\/\{id\}';/);
  t.match(out, /readonly keyed: true;/);
  t.match(out, /readonly pathParams: \{\n {4}readonly id: string;\n {2}\};/);
  t.match(out, /\/\*\* Its name\. \*\/\n {4}readonly name: string;/);
  t.match(out, /readonly tags\?: readonly string\[\];/);
  t.match(out, /readonly size\?: number \| null;/);
  t.match(out, /readonly kind\?: 'a' \| 'b';/);
  t.match(out, /readonly flag\?: boolean;/);
  t.match(out, /readonly fixed\?: 3;/);
  t.match(out, /200: \{\};/, 'an object without members');
  t.match(out, /204: null;/, 'no content');
  t.match(out, /404: Problem;\n {4}409: Problem;/, 'error answers share the Problem type');
  t.match(
    out,
    /export interface Problem \{\n {2}readonly type: string;\n {2}readonly code: string;\n {2}readonly \[member: string\]: unknown;\n\}/,
  );
  t.throws(() => generateTypes(small, ['nope']), /operation nope is not in the document/);
  t.throws(() => generateTypes({ paths: 3 }, ['x']), /not an OpenAPI document/);
  const weird = structuredClone(small) as unknown as {
    paths: Record<string, { put: { responses: Record<string, unknown> } }>;
  };
  const put = weird.paths['/api/v1/things/{id}']!.put;
  put.responses['200'] = {
    content: {
      'application/json': {
        schema: { type: 'object', patternProperties: {}, properties: { x: { oneOf: [] } } },
      },
    },
  };
  t.throws(() => generateTypes(weird, ['putThing']), /putThing.*200.*x: cannot type/);
  t.end();
});

void t.test(
  "the error statuses a key stores come from the keyed operations' Idempotency-Key header",
  (t) => {
    t.match(
      generateTypes(small, ['putThing']),
      /export const STORED_ERRORS: readonly number\[\] = \[400, 422\];/,
      'sorted',
    );
    const header = (doc: unknown) =>
      (
        doc as {
          paths: Record<string, { put: { parameters: { schema: Record<string, unknown> }[] } }>;
        }
      ).paths['/api/v1/things/{id}']!.put.parameters[1]!.schema;
    const missing = structuredClone(small);
    delete header(missing)['x-stored-error-statuses'];
    t.throws(
      () => generateTypes(missing, ['putThing']),
      /putThing: its Idempotency-Key header has no x-stored-error-statuses/,
    );
    const odd = structuredClone(small);
    header(odd)['x-stored-error-statuses'] = [200];
    t.throws(() => generateTypes(odd, ['putThing']), /a list of 4xx statuses/);
    // Two keyed operations that disagree.
    const two = structuredClone(small) as unknown as {
      paths: Record<string, Record<string, unknown>>;
    };
    const other = structuredClone(two.paths['/api/v1/things/{id}']!['put']) as {
      operationId: string;
      parameters: { schema: Record<string, unknown> }[];
    };
    other.operationId = 'postThing';
    other.parameters[1]!.schema['x-stored-error-statuses'] = [400];
    two.paths['/api/v1/things/{id}']!['post'] = other;
    t.throws(
      () => generateTypes(two, ['putThing', 'postThing']),
      /postThing and putThing list other x-stored-error-statuses: \[400\] and \[400,422\]/,
    );
    t.end();
  },
);
