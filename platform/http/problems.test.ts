import t from 'tap';
import { problem } from '../../kernel/errs/index.js';
import {
  fieldErrors,
  MAX_LISTED_FIELD_ERRORS,
  toAppError,
  VALIDATION_SCAN_LIMIT,
} from './problems.js';
import { defaultToProblem } from './idempotency/index.js';

void t.test('an AppError maps to itself', (t) => {
  const e = problem('not_found', 'No such account.');
  t.equal(toAppError(e), e);
  t.end();
});

void t.test(
  'validation errors become validation_failed with pointers per part of the request',
  (t) => {
    const err = Object.assign(new Error('body/amount must be integer'), {
      statusCode: 400,
      validationContext: 'body',
      validation: [
        { instancePath: '/amount', keyword: 'type', message: 'must be integer', params: {} },
        {
          instancePath: '',
          keyword: 'required',
          message: "must have required property 'to'",
          params: { missingProperty: 'to' },
        },
        { instancePath: '/a~b', keyword: 'minLength', params: {} },
      ],
    });
    const e = toAppError(err);
    t.equal(e.code, 'validation_failed');
    t.same(e.errors, [
      { pointer: '#body/amount', code: 'type', detail: 'must be integer' },
      { pointer: '#body/to', code: 'required', detail: "must have required property 'to'" },
      { pointer: '#body/a~b', code: 'min_length' },
    ]);
    t.same(fieldErrors('querystring', [{ instancePath: '/limit', keyword: 'maximum' }]), [
      { pointer: '#query/limit', code: 'maximum' },
    ]);
    t.same(fieldErrors('headers', [{ keyword: 'required', params: { missingProperty: 'a/b' } }]), [
      { pointer: '#header/a~1b', code: 'required' },
    ]);
    t.same(fieldErrors('params', [{ instancePath: '/id' }]), [
      { pointer: '#path/id', code: 'invalid' },
    ]);
    t.end();
  },
);

void t.test('Fastify body errors map to their problems', (t) => {
  const cases: [string, string, number][] = [
    ['FST_ERR_CTP_BODY_TOO_LARGE', 'payload_too_large', 413],
    ['FST_ERR_CTP_INVALID_MEDIA_TYPE', 'unsupported_media_type', 415],
    ['FST_ERR_CTP_EMPTY_JSON_BODY', 'validation_failed', 400],
    ['FST_ERR_CTP_INVALID_JSON_BODY', 'validation_failed', 400],
  ];
  for (const [code, expected, status] of cases) {
    const e = toAppError(Object.assign(new Error('x'), { code }));
    t.equal(e.code, expected, code);
    t.equal(e.status, status, code);
  }
  const syntax = toAppError(
    Object.assign(new SyntaxError('Unexpected token'), { statusCode: 400 }),
  );
  t.same(syntax.errors, [{ pointer: '#body', code: 'invalid_json' }]);
  t.end();
});

void t.test('retryable and timeout SQLSTATEs become 503 with Retry-After', (t) => {
  for (const code of [
    '40001',
    '40P01',
    '55P03',
    '57014',
    '25P04',
    'RESULT_INCOMPLETE',
    'RESULT_UNANSWERED',
  ]) {
    const e = toAppError(Object.assign(new Error('pg'), { code }));
    t.equal(e.code, 'service_unavailable', code);
    t.equal(e.retryAfterSeconds, 1, code);
  }
  t.end();
});

void t.test(
  'HTTP status codes of library errors map to catalogue words, unknown ones to internal_error',
  (t) => {
    t.equal(
      toAppError(Object.assign(new Error('Route GET:/x not found'), { statusCode: 404 })).code,
      'not_found',
    );
    t.equal(
      toAppError(Object.assign(new Error('m'), { statusCode: 405 })).code,
      'method_not_allowed',
    );
    t.equal(toAppError(Object.assign(new Error('m'), { statusCode: 429 })).code, 'rate_limited');
    const bad = toAppError(Object.assign(new Error('m'), { statusCode: 400 }));
    t.equal(bad.code, 'validation_failed');
    t.same(bad.errors, [{ pointer: '#', code: 'invalid' }]);
    const internal = toAppError(new Error('boom at /srv'));
    t.equal(internal.code, 'internal_error');
    t.notMatch(internal.detail, /srv/);
    t.equal(toAppError('a string').code, 'internal_error');
    t.equal(toAppError(null).code, 'internal_error');
    t.end();
  },
);

void t.test('a validation error that names nothing still lists one entry', (t) => {
  const e = toAppError(
    Object.assign(new Error('body is invalid'), {
      statusCode: 400,
      validationContext: 'body',
      validation: [],
    }),
  );
  t.equal(e.code, 'validation_failed');
  t.same(e.errors, [{ pointer: '#body', code: 'invalid' }]);
  t.end();
});

void t.test('a validation error lists a bounded number of entries and counts the rest', (t) => {
  const many = Array.from({ length: MAX_LISTED_FIELD_ERRORS + 23 }, (_, i) => ({
    instancePath: `/x${String(i)}`,
    keyword: 'additionalProperties',
  }));
  const e = toAppError(
    Object.assign(new Error('x'), { statusCode: 400, validationContext: 'body', validation: many }),
  );
  t.equal(e.errors?.length, MAX_LISTED_FIELD_ERRORS);
  t.equal(e.errors?.[0]?.pointer, '#body/x0');
  t.match(e.detail, `${String(MAX_LISTED_FIELD_ERRORS + 23)} problems`);
  const few = toAppError(
    Object.assign(new Error('x'), {
      statusCode: 400,
      validationContext: 'body',
      validation: many.slice(0, MAX_LISTED_FIELD_ERRORS),
    }),
  );
  t.equal(few.errors?.length, MAX_LISTED_FIELD_ERRORS);
  t.equal(few.detail, 'The request is not valid.');
  t.end();
});

void t.test('findings that used up the scan budget are counted as a lower bound', (t) => {
  // The validator stopped looking there: more problems may follow.
  const full = Array.from({ length: VALIDATION_SCAN_LIMIT }, (_, i) => ({
    instancePath: `/x${String(i)}`,
    keyword: 'additionalProperties',
  }));
  const e = toAppError(
    Object.assign(new Error('x'), { statusCode: 400, validationContext: 'body', validation: full }),
  );
  t.equal(
    e.detail,
    `The request is not valid: at least ${String(VALIDATION_SCAN_LIMIT)} problems, the first ${String(MAX_LISTED_FIELD_ERRORS)} listed.`,
  );
  t.end();
});

void t.test(
  'static-file refusals keep their client status: 403 forbidden_path, 416 with its Content-Range',
  (t) => {
    const forbidden = toAppError(
      Object.assign(new Error('Forbidden'), { code: 'FST_STATIC_FORBIDDEN_PATH', statusCode: 403 }),
    );
    t.equal(forbidden.code, 'forbidden_path');
    t.equal(forbidden.status, 403);
    const range = toAppError(
      Object.assign(new Error('Range Not Satisfiable'), {
        statusCode: 416,
        headers: { 'Content-Range': 'bytes */187535' },
      }),
    );
    t.equal(range.code, 'range_not_satisfiable');
    t.equal(range.status, 416);
    t.same(range.headers, { 'content-range': 'bytes */187535' });
    const odd = toAppError(
      Object.assign(new Error('x'), {
        statusCode: 416,
        headers: { 'content-range': 'bytes */1\r\nx: y' },
      }),
    );
    t.equal(odd.headers, undefined, 'a header of another shape is not copied');
    t.equal(
      toAppError(Object.assign(new Error('x'), { statusCode: 416, headers: 'no' })).headers,
      undefined,
    );
    // A 4xx of unknown meaning is not turned into a final client problem,
    // which a keyed request would store for the key's lifetime.
    for (const status of [401, 403, 408, 418, 425]) {
      const unknown = toAppError(Object.assign(new Error('m'), { statusCode: status }));
      t.equal(unknown.status, 500, `a bare ${String(status)} is not a stored final answer`);
    }
    t.end();
  },
);

void t.test("a 412 is precondition_failed only from the static files' sender", (t) => {
  const sent = toAppError(
    Object.assign(new Error('Precondition Failed'), {
      name: 'PreconditionFailedError',
      statusCode: 412,
    }),
  );
  t.equal(sent.code, 'precondition_failed');
  t.equal(sent.status, 412);
  // A stray 412 of any other origin says nothing a client can act on.
  const stray = toAppError(Object.assign(new Error('upstream'), { statusCode: 412 }));
  t.equal(stray.code, 'internal_error');
  t.equal(stray.status, 500);
  t.end();
});

void t.test(
  "the idempotency plugin's default mapping gives the same validation problem as the server's",
  (t) => {
    const cases = [
      { validationContext: 'body', validation: [{ instancePath: '/amount', keyword: 'type' }] },
      {
        validationContext: 'querystring',
        validation: [{ instancePath: '/limit', keyword: 'maximum', message: 'too big' }],
      },
      {
        validationContext: 'headers',
        validation: [{ keyword: 'required', params: { missingProperty: 'a/b' } }],
      },
      { validationContext: 'params', validation: [] },
      {
        validationContext: 'body',
        validation: Array.from({ length: MAX_LISTED_FIELD_ERRORS + 5 }, (_, i) => ({
          instancePath: `/x${String(i)}`,
          keyword: 'additionalProperties',
        })),
      },
    ];
    for (const c of cases) {
      const err = Object.assign(new Error('invalid'), { statusCode: 400, ...c });
      const server = toAppError(err);
      const plugin = defaultToProblem(err);
      t.equal(plugin.code, server.code, `${c.validationContext}: code`);
      t.equal(plugin.detail, server.detail, `${c.validationContext}: detail`);
      t.same(plugin.errors, server.errors, `${c.validationContext}: field errors`);
    }
    t.end();
  },
);
