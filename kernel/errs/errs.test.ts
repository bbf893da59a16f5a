import t from 'tap';
import {
  AppError,
  isAppError,
  isProblemCode,
  problem,
  problemCatalogue,
  problemType,
  toProblemBody,
} from './index.js';
import type { ProblemBody, ProblemCode } from './index.js';

const expectedStatuses: Record<ProblemCode, number> = {
  validation_failed: 400,
  unauthenticated: 401,
  step_up_required: 401,
  forbidden: 403,
  forbidden_path: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  request_in_progress: 409,
  gone: 410,
  precondition_failed: 412,
  request_timeout: 408,
  payload_too_large: 413,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  expectation_failed: 417,
  idempotency_key_reuse: 422,
  unprocessable: 422,
  precondition_required: 428,
  rate_limited: 429,
  request_header_fields_too_large: 431,
  internal_error: 500,
  service_unavailable: 503,
  commit_outcome_unknown: 503,
};

const codes = Object.keys(problemCatalogue) as ProblemCode[];
const correlationId = '01890a5d-ac96-774b-bcce-b302099a8057';

void t.test('the catalogue holds exactly the documented codes with their statuses', (t) => {
  t.same([...codes].sort(), Object.keys(expectedStatuses).sort());
  for (const code of codes) {
    t.equal(problemCatalogue[code].status, expectedStatuses[code], code);
  }
  t.end();
});

void t.test('catalogue codes are snake_case, and titles and types unique', (t) => {
  for (const code of codes) {
    t.match(code, /^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/, `${code} is snake_case`);
  }
  t.equal(new Set(codes.map((c) => problemType(c))).size, codes.length, 'type URIs unique');
  t.equal(new Set(codes.map((c) => problemCatalogue[c].title)).size, codes.length, 'titles unique');
  t.end();
});

void t.test('every catalogue entry is documented', (t) => {
  for (const code of codes) {
    const entry = problemCatalogue[code];
    t.ok(entry.title.length > 0, `${code} has a title`);
    t.ok(entry.description.length > 20, `${code} has a description`);
    t.ok(entry.status >= 400 && entry.status <= 599, `${code} status is an error status`);
    t.notMatch(
      entry.title + entry.description,
      /[\u2013\u2014]/,
      `${code} text has no long dashes`,
    );
  }
  t.end();
});

void t.test('the catalogue is frozen all the way down', (t) => {
  t.ok(Object.isFrozen(problemCatalogue));
  for (const code of codes) {
    t.ok(Object.isFrozen(problemCatalogue[code]), code);
  }
  t.throws(() => {
    (problemCatalogue as unknown as Record<string, unknown>)['teapot'] = { status: 418 };
  }, TypeError);
  t.throws(() => {
    (problemCatalogue.not_found as { status: number }).status = 200;
  }, TypeError);
  t.equal(problemCatalogue.not_found.status, 404);
  t.end();
});

void t.test('problemType builds the RFC 9457 type URI', (t) => {
  t.equal(problemType('not_found'), 'urn:problem-type:not_found');
  t.equal(problemType('idempotency_key_reuse'), 'urn:problem-type:idempotency_key_reuse');
  t.end();
});

void t.test('isProblemCode', (t) => {
  t.ok(isProblemCode('rate_limited'));
  t.notOk(isProblemCode('teapot'));
  t.notOk(isProblemCode('toString'), 'inherited members are not codes');
  t.notOk(isProblemCode('__proto__'));
  t.notOk(isProblemCode(''));
  t.end();
});

void t.test('problem takes the status from the catalogue', (t) => {
  for (const code of codes) {
    const err = problem(code, `detail of ${code}`);
    t.equal(err.status, expectedStatuses[code], code);
    t.equal(err.code, code);
    t.equal(err.detail, `detail of ${code}`);
    t.equal(err.message, `detail of ${code}`);
  }
  t.end();
});

void t.test('AppError is a real Error', (t) => {
  const err = new AppError('not_found', 'no account 42');
  t.ok(err instanceof Error);
  t.ok(err instanceof AppError);
  t.equal(err.name, 'AppError');
  t.equal(err.status, 404);
  t.match(err.stack, /AppError: no account 42/);
  t.equal(err.title, 'Not found');
  t.end();
});

void t.test('absent extras are absent, not undefined', (t) => {
  const err = problem('forbidden', 'no');
  for (const key of ['errors', 'reason', 'hint', 'retryAfterSeconds', 'headers', 'cause']) {
    t.notOk(key in err, `${key} absent`);
  }
  const explicit = problem('forbidden', 'no', { cause: undefined });
  t.notOk('cause' in explicit, 'an undefined cause is no cause');
  t.end();
});

void t.test('extras are preserved', (t) => {
  const cause = new Error('lock timeout');
  const err = problem('request_in_progress', 'the key is in use', {
    reason: 'key_locked',
    hint: 'repeat the request after the Retry-After delay',
    retryAfterSeconds: 1,
    headers: { 'www-authenticate': 'Bearer' },
    errors: [
      { pointer: '#header/Idempotency-Key', code: 'in_use', detail: 'held by another request' },
      { pointer: '#/amount', code: 'required' },
    ],
    cause,
  });
  t.equal(err.reason, 'key_locked');
  t.equal(err.hint, 'repeat the request after the Retry-After delay');
  t.equal(err.retryAfterSeconds, 1);
  t.same(err.headers, { 'www-authenticate': 'Bearer' });
  t.same(err.errors, [
    { pointer: '#header/Idempotency-Key', code: 'in_use', detail: 'held by another request' },
    { pointer: '#/amount', code: 'required' },
  ]);
  t.equal(err.cause, cause);
  t.end();
});

void t.test('extras are copied and frozen', (t) => {
  const headers: Record<string, string> = { allow: 'GET' };
  const errors = [{ pointer: '#/a', code: 'required' }];
  const err = problem('method_not_allowed', 'POST is not supported', { headers, errors });
  headers['allow'] = 'POST';
  errors.push({ pointer: '#/b', code: 'required' });
  errors[0]!.code = 'changed';
  t.same(err.headers, { allow: 'GET' });
  t.same(err.errors, [{ pointer: '#/a', code: 'required' }]);
  t.ok(Object.isFrozen(err.headers));
  t.ok(Object.isFrozen(err.errors));
  t.ok(Object.isFrozen(err.errors?.[0]));
  t.end();
});

void t.test('header names are lower-cased, so one header cannot appear twice', (t) => {
  const err = problem('unauthenticated', 'no token', {
    headers: { 'WWW-Authenticate': 'Bearer', Allow: 'GET' },
  });
  t.strictSame({ ...err.headers }, { 'www-authenticate': 'Bearer', allow: 'GET' });
  t.end();
});

void t.test('retryAfterSeconds must be a non-negative integer', (t) => {
  t.equal(problem('rate_limited', 'slow down', { retryAfterSeconds: 0 }).retryAfterSeconds, 0);
  for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    t.throws(
      () => problem('rate_limited', 'slow down', { retryAfterSeconds: bad }),
      RangeError,
      String(bad),
    );
  }
  t.end();
});

void t.test('an unknown code is refused', (t) => {
  t.throws(
    () => new AppError('teapot' as ProblemCode, 'short and stout'),
    new TypeError('unknown problem code "teapot"'),
  );
  t.throws(
    () => problem('constructor' as ProblemCode, 'x'),
    TypeError,
    'inherited members are not codes',
  );
  t.end();
});

void t.test('isAppError', (t) => {
  t.ok(isAppError(problem('gone', 'deleted')));
  t.notOk(isAppError(new Error('plain')));
  t.notOk(isAppError({ code: 'gone', status: 410, detail: 'look-alike' }));
  t.notOk(isAppError(undefined));
  t.notOk(isAppError('gone'));
  t.end();
});

void t.test('toProblemBody: minimal shape', (t) => {
  const body = toProblemBody(problem('not_found', 'no account 42'), correlationId);
  const expected: ProblemBody = {
    type: 'urn:problem-type:not_found',
    title: 'Not found',
    status: 404,
    detail: 'no account 42',
    code: 'not_found',
    correlation_id: correlationId,
  };
  t.strictSame(body, expected);
  t.same(Object.keys(body), ['type', 'title', 'status', 'detail', 'code', 'correlation_id']);
  t.same(JSON.parse(JSON.stringify(body)), expected, 'survives JSON');
  t.end();
});

void t.test('toProblemBody: full shape, and what stays out of the body', (t) => {
  const err = problem('validation_failed', 'the request is invalid', {
    errors: [
      { pointer: '#header/Idempotency-Key', code: 'invalid_format' },
      { pointer: '#/amount', code: 'minimum', detail: 'must be at least 1' },
    ],
    reason: 'schema',
    hint: 'send a UUIDv7',
    retryAfterSeconds: 3,
    headers: { 'x-extra': 'y' },
    cause: new Error('internal detail'),
  });
  const body = toProblemBody(err, correlationId);
  t.strictSame(body, {
    type: 'urn:problem-type:validation_failed',
    title: 'Validation failed',
    status: 400,
    detail: 'the request is invalid',
    code: 'validation_failed',
    correlation_id: correlationId,
    errors: [
      { pointer: '#header/Idempotency-Key', code: 'invalid_format' },
      { pointer: '#/amount', code: 'minimum', detail: 'must be at least 1' },
    ],
    reason: 'schema',
    hint: 'send a UUIDv7',
  });
  t.notOk('detail' in (body.errors?.[0] ?? {}), 'absent detail omitted in entries');
  t.notMatch(
    JSON.stringify(body),
    /internal detail|x-extra|retry/i,
    'cause, headers and retry stay out',
  );
  t.end();
});

void t.test('toProblemBody: each optional member on its own', (t) => {
  t.same(
    Object.keys(
      toProblemBody(problem('conflict', 'c', { reason: 'one_time_secret' }), correlationId),
    ),
    ['type', 'title', 'status', 'detail', 'code', 'correlation_id', 'reason'],
  );
  t.same(
    Object.keys(toProblemBody(problem('conflict', 'c', { hint: 'make a new one' }), correlationId)),
    ['type', 'title', 'status', 'detail', 'code', 'correlation_id', 'hint'],
  );
  const withEmpty = toProblemBody(problem('validation_failed', 'v', { errors: [] }), correlationId);
  t.same(withEmpty.errors, [], 'an explicit empty list is kept');
  t.end();
});

void t.test('toProblemBody is pure', (t) => {
  const err = problem('validation_failed', 'v', { errors: [{ pointer: '#/a', code: 'required' }] });
  const a = toProblemBody(err, 'c1');
  const b = toProblemBody(err, 'c2');
  t.equal(a.correlation_id, 'c1');
  t.equal(b.correlation_id, 'c2');
  t.not(a.errors, err.errors, 'entries are copies');
  (a.errors![0] as { code: string }).code = 'mutated';
  t.equal(err.errors?.[0]?.code, 'required', 'the error is untouched');
  t.end();
});
