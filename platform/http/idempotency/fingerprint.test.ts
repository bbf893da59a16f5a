import { createHash } from 'node:crypto';
import t from 'tap';
import { fingerprint } from './fingerprint.js';
import { parseKey, readKeyHeader } from './key.js';

const base = {
  method: 'post',
  rawUrl: '/api/v1/things',
  ifMatch: undefined,
  ifNoneMatch: undefined,
};

void t.test(
  'the fingerprint is SHA-256 over method, path, preconditions and canonical body',
  (t) => {
    const expected = createHash('sha256')
      .update('POST\n/api/v1/things\n[null,null]\n{"a":1,"b":"x"}')
      .digest();
    t.same(
      fingerprint({ ...base, body: Buffer.from('{"b":"x","a":1}') }),
      expected,
      'documented definition',
    );
    const withPre = createHash('sha256').update('PUT\n/x\n["\\"3\\"",null]\n').digest();
    t.same(
      fingerprint({
        method: 'PUT',
        rawUrl: '/x',
        ifMatch: '"3"',
        ifNoneMatch: undefined,
        body: undefined,
      }),
      withPre,
    );
    t.end();
  },
);

void t.test('what changes the fingerprint and what does not', (t) => {
  const f = (o: Partial<Parameters<typeof fingerprint>[0]>) =>
    fingerprint({ ...base, body: Buffer.from('{"a":1}'), ...o }).toString('hex');
  const ref = f({});
  t.equal(f({ body: Buffer.from(' { "a" : 1.0 } ') }), ref, 'whitespace and number form');
  t.equal(
    f({ rawUrl: '/api/v1/things?x=1' }),
    ref,
    'the query is not part of it (keyed requests refuse one)',
  );
  t.not(f({ method: 'PUT' }), ref, 'method');
  t.not(f({ rawUrl: '/api/v1/things/' }), ref, 'path as received');
  t.not(f({ rawUrl: '/api/v1/%74hings' }), ref, 'no decoding of the raw path');
  t.not(f({ ifMatch: '"1"' }), ref, 'If-Match');
  t.not(f({ ifNoneMatch: '"1"' }), ref, 'If-None-Match');
  t.not(f({ ifMatch: '"1"' }), f({ ifNoneMatch: '"1"' }), 'the two preconditions are told apart');
  t.not(f({ ifMatch: '' }), ref, 'an empty precondition is not an absent one');
  t.not(f({ body: Buffer.from('{"a":2}') }), ref, 'value');
  t.not(f({ body: undefined }), ref, 'no body');
  t.equal(
    f({ body: Buffer.alloc(0) }),
    f({ body: undefined }),
    'empty body and no body are the same',
  );
  t.end();
});

void t.test('key header: bare or quoted UUIDv7, one header only', (t) => {
  const key = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
  t.same(parseKey(key), { kind: 'valid', key });
  t.same(parseKey(key.toUpperCase()), { kind: 'valid', key });
  t.same(parseKey(`"${key}"`), { kind: 'valid', key });
  for (const bad of [
    '',
    '"',
    `"${key}`,
    `${key}"`,
    `'${key}'`,
    `"${key}"x`,
    '9b2f1a4e-8c3d-4e5f-9a6b-7c8d9e0f1a2b',
    `${key}0`,
    `{${key}}`,
  ]) {
    t.same(parseKey(bad), { kind: 'invalid' }, JSON.stringify(bad));
  }
  t.same(readKeyHeader(['Host', 'x']), { kind: 'absent' });
  t.same(readKeyHeader(['idempotency-KEY', ` ${key} `]), { kind: 'valid', key });
  t.same(
    readKeyHeader(['Idempotency-Key', key, 'idempotency-key', key]),
    { kind: 'invalid' },
    'two headers',
  );
  t.end();
});
