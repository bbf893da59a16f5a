/**
 * The retry policy without a network: how each answer is classified, how
 * Retry-After is read, and the jittered exponential backoff, with the clock
 * and the random source injected.
 */
import t from 'tap';
import {
  backoffDelay,
  classifyAnswer,
  parseHttpDate,
  parseRetryAfter,
  type BackoffSettings,
} from './retry.js';

const NOW = Date.parse('2026-06-01T10:00:00Z');

void t.test('Retry-After in seconds and as an HTTP date', (t) => {
  t.equal(parseRetryAfter('1', NOW), 1_000);
  t.equal(parseRetryAfter('0', NOW), 0);
  t.equal(parseRetryAfter(' 120 ', NOW), 120_000, 'surrounding whitespace is allowed');
  t.equal(parseRetryAfter('Mon, 01 Jun 2026 10:00:30 GMT', NOW), 30_000, 'IMF-fixdate');
  t.equal(parseRetryAfter('Mon, 01 Jun 2026 09:59:00 GMT', NOW), 0, 'a date in the past is now');
  for (const bad of [null, '', '-1', '1.5', '1e3', '0x10', 'soon', 'Mon, 99 Foo 2026 GMT']) {
    t.equal(parseRetryAfter(bad, NOW), undefined, `"${String(bad)}" is no Retry-After`);
  }
  t.end();
});

void t.test('backoff grows exponentially with jitter, is capped and honours Retry-After', (t) => {
  const s: BackoffSettings = { baseMs: 100, capMs: 1_000, maxRetryAfterMs: 60_000 };
  // Equal jitter: half the step fixed, half drawn.
  t.equal(
    backoffDelay(1, s, () => 0),
    50,
  );
  t.equal(
    backoffDelay(1, s, () => 0.999999),
    100,
  );
  t.equal(
    backoffDelay(2, s, () => 0),
    100,
  );
  t.equal(
    backoffDelay(3, s, () => 0.5),
    300,
  );
  t.equal(
    backoffDelay(4, s, () => 1),
    800,
  );
  t.equal(
    backoffDelay(5, s, () => 1),
    1_000,
    'capped',
  );
  t.equal(
    backoffDelay(80, s, () => 1),
    1_000,
    'no overflow for a large attempt count',
  );
  t.equal(
    backoffDelay(1, s, () => 0, 2_000),
    2_000,
    'Retry-After longer than the backoff wins',
  );
  t.equal(
    backoffDelay(4, s, () => 1, 10),
    800,
    'a shorter Retry-After does not shorten the backoff',
  );
  t.equal(
    backoffDelay(1, s, () => 0, 3_600_000),
    60_000,
    'Retry-After is bounded',
  );
  t.throws(() => backoffDelay(0, s, () => 0), /attempt/);
  t.end();
});

void t.test('answers are final, retried, a caller bug or a halt', (t) => {
  const c = (status: number, code?: string, retryAfter: string | null = null) =>
    classifyAnswer({ status, code, retryAfter, marked: true }, NOW);
  for (const s of [200, 201, 204]) t.same(c(s), { kind: 'final' }, `${String(s)} is final`);
  for (const s of [400, 403, 404, 410, 412, 413, 415]) {
    t.same(c(s, 'x'), { kind: 'final' }, `${String(s)} is a stored final answer`);
  }
  t.same(c(409, 'conflict'), { kind: 'final' }, '409 conflict is final');
  t.same(c(422, 'unprocessable'), { kind: 'final' }, '422 other than key reuse is final');
  t.same(c(422, 'idempotency_key_reuse'), { kind: 'key_reuse' });
  t.same(c(409, 'request_in_progress', '1'), {
    kind: 'retry',
    reason: '409 request_in_progress',
    retryAfterMs: 1_000,
  });
  t.same(c(429, 'rate_limited', '7'), {
    kind: 'retry',
    reason: '429 rate_limited',
    retryAfterMs: 7_000,
  });
  t.same(c(503, 'service_unavailable'), {
    kind: 'retry',
    reason: '503 service_unavailable',
    retryAfterMs: undefined,
  });
  t.same(c(500), { kind: 'retry', reason: '500', retryAfterMs: undefined });
  t.same(c(502), { kind: 'retry', reason: '502', retryAfterMs: undefined });
  t.same(c(408, 'request_timeout'), {
    kind: 'retry',
    reason: '408 request_timeout',
    retryAfterMs: undefined,
  });
  t.same(c(401, 'unauthenticated'), { kind: 'unauthenticated' });
  for (const s of [301, 405, 428, 431, 451]) {
    t.same(c(s), { kind: 'unexpected', reason: String(s) }, `${String(s)} is unexpected`);
    t.same(
      classifyAnswer({ status: s, marked: true, mayHaveReached: true }, NOW),
      { kind: 'outcome_unknown', reason: String(s) },
      `${String(s)} after an attempt that may have reached the server is an unknown outcome`,
    );
  }
  t.same(
    classifyAnswer({ status: 503, mayHaveReached: true }, NOW),
    { kind: 'retry', reason: '503', retryAfterMs: undefined },
    'a status to repeat is repeated whatever came before',
  );
  t.end();
});

void t.test('an unmarked 2xx or stored status is repeated once, then outcome_unknown', (t) => {
  const c = (status: number, marked: boolean, previousUnmarked: boolean, code = 'x') =>
    classifyAnswer({ status, code, retryAfter: null, marked, previousUnmarked }, NOW);
  for (const s of [200, 201, 204, 400, 403, 404, 409, 410, 412, 413, 415, 422]) {
    t.same(
      c(s, false, false),
      { kind: 'unmarked', reason: `${String(s)} x` },
      `${String(s)} without the marker is not final, even on the first attempt`,
    );
    t.same(
      c(s, false, true),
      { kind: 'outcome_unknown', reason: `${String(s)} x` },
      `${String(s)} without the marker a second time in a row`,
    );
    t.same(c(s, true, true), { kind: 'final' }, `${String(s)} with the marker`);
  }
  t.same(c(422, false, true, 'idempotency_key_reuse'), { kind: 'key_reuse' });
  t.same(c(409, false, true, 'request_in_progress'), {
    kind: 'retry',
    reason: '409 request_in_progress',
    retryAfterMs: undefined,
  });
  t.same(
    classifyAnswer({ status: 404, code: 'not_found' }, NOW),
    { kind: 'unmarked', reason: '404 not_found' },
    'without the facts, an answer is taken as unmarked',
  );
  t.end();
});

void t.test('an HTTP date is read in its IMF-fixdate form only', (t) => {
  t.equal(parseHttpDate('Mon, 01 Jun 2026 10:00:30 GMT'), NOW + 30_000);
  t.equal(parseHttpDate(' Mon, 01 Jun 2026 10:00:00 GMT '), NOW, 'surrounding whitespace');
  for (const bad of [null, '', '2026-06-01T10:00:00Z', 'Monday, 01-Jun-26 10:00:00 GMT', 'soon']) {
    t.equal(parseHttpDate(bad), undefined, `"${String(bad)}" is no IMF-fixdate`);
  }
  t.end();
});
