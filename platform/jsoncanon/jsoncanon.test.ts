import t from 'tap';
import {
  canonicalBody,
  canonicalJson,
  findInexactInteger,
  hasDuplicateMembers,
  jsonPointer,
  MAX_JSON_DEPTH,
  parseJsonStrict,
  readsAsAnotherInteger,
} from './index.js';

void t.test('RFC 8785 vectors', (t) => {
  // RFC 8785 section 3.2.3 (structure, numbers, strings).
  const input =
    '{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],' +
    '"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/","literals":[null,true,false]}';
  t.equal(
    canonicalJson(JSON.parse(input)),
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
      '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
  );
  // RFC 8785 section 3.2.3: property sorting by UTF-16 code units.
  const sorting =
    '{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh",' +
    '"1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control","\\u00f6":"Latin Small Letter O With Diaeresis"}';
  // Object.keys would put "1" first (an integer-like key), so read the order from the text.
  const canonical = canonicalJson(JSON.parse(sorting));
  const keys = [...canonical.matchAll(/"((?:[^"\\]|\\.)*)":/g)].map(
    (m) => JSON.parse(`"${m[1] ?? ''}"`) as string,
  );
  t.same(keys, ['\r', '1', '\u0080', '\u00f6', '\u20ac', '\ud83d\ude00', '\ufb33']);
  // Number serialization (ECMAScript Number::toString, RFC 8785 appendix B).
  t.equal(
    canonicalJson([1e21, -0, 5e-324, 1.7976931348623157e308, 1e-7, 123456789012345680000]),
    '[1e+21,0,5e-324,1.7976931348623157e+308,1e-7,123456789012345680000]',
  );
  t.throws(() => canonicalJson(Number.NaN));
  t.throws(() => canonicalJson({ a: Number.POSITIVE_INFINITY }));
  t.end();
});

void t.test('member order, whitespace and escapes do not change the canonical form', (t) => {
  const a = canonicalBody(Buffer.from('{"b":1,"a":"x"}'));
  const b = canonicalBody(Buffer.from(' {\n  "a" : "\\u0078",\t"b":1.0 } '));
  t.equal(a.kind, 'json');
  t.equal(a.bytes.toString(), '{"a":"x","b":1}');
  t.same(b.bytes, a.bytes);
  t.end();
});

void t.test('duplicate member names are really detected, nested and escaped', (t) => {
  t.equal(hasDuplicateMembers('{"a":1,"a":2}'), true);
  t.equal(hasDuplicateMembers('{"a":1,"\\u0061":2}'), true, 'escaped spelling of the same name');
  t.equal(hasDuplicateMembers('{"x":{"a":1,"b":{"c":1,"c":2}}}'), true, 'nested');
  t.equal(hasDuplicateMembers('[{"a":1},{"a":2}]'), false, 'same name in sibling objects');
  t.equal(hasDuplicateMembers('{"a":{"a":1}}'), false, 'same name at different depths');
  t.equal(hasDuplicateMembers('{"a":1,"b":[{"a":1}],"c":2}'), false);
  t.end();
});

void t.test('a body with duplicate members is fingerprinted by its raw bytes', (t) => {
  const raw = Buffer.from('{"a":1,"a":2}');
  const body = canonicalBody(raw);
  t.equal(body.kind, 'raw');
  t.same(body.bytes, raw);
  const other = canonicalBody(Buffer.from('{"a":2}'));
  t.not(
    body.bytes.toString(),
    other.bytes.toString(),
    'not confused with the value JSON.parse keeps',
  );
  t.end();
});

void t.test('bodies that are not JSON, and empty bodies', (t) => {
  t.same(canonicalBody(Buffer.from('not json')), { kind: 'raw', bytes: Buffer.from('not json') });
  t.same(canonicalBody(Buffer.alloc(0)), { kind: 'empty', bytes: Buffer.alloc(0) });
  t.same(canonicalBody(undefined), { kind: 'empty', bytes: Buffer.alloc(0) });
  t.equal(canonicalBody(Buffer.from('{"a":1} // c')).kind, 'raw', 'comments are not JSON');
  t.end();
});

void t.test(
  'parseJsonStrict refuses what PostgreSQL jsonb cannot hold and prototype poisoning',
  (t) => {
    t.same(parseJsonStrict('{"a":[1,"x"]}'), { ok: true, value: { a: [1, 'x'] } });
    t.same(parseJsonStrict('{"a":'), { ok: false, reason: 'invalid_json' });
    t.same(parseJsonStrict('"\\ud800"'), { ok: false, reason: 'lone_surrogate' });
    t.same(
      parseJsonStrict('{"k\\udc00":1}'),
      { ok: false, reason: 'lone_surrogate' },
      'in a member name too',
    );
    t.same(
      parseJsonStrict('"\\ud83d\\ude00"'),
      { ok: true, value: '\ud83d\ude00' },
      'a pair is fine',
    );
    t.same(parseJsonStrict('"a\\u0000b"'), { ok: false, reason: 'nul_character' });
    t.same(parseJsonStrict('{"__proto__":{"x":1}}'), { ok: false, reason: 'prototype_poisoning' });
    t.same(parseJsonStrict('{"constructor":{"prototype":{"x":1}}}'), {
      ok: false,
      reason: 'prototype_poisoning',
    });
    t.same(parseJsonStrict('{"constructor":"fine"}'), { ok: true, value: { constructor: 'fine' } });
    t.end();
  },
);

void t.test('bodies nested deeper than MAX_JSON_DEPTH are refused before parsing', (t) => {
  const nest = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
  t.same(parseJsonStrict(nest(MAX_JSON_DEPTH)), {
    ok: true,
    value: JSON.parse(nest(MAX_JSON_DEPTH)) as unknown,
  });
  t.same(parseJsonStrict(nest(MAX_JSON_DEPTH + 1)), { ok: false, reason: 'too_deep' });
  t.same(
    parseJsonStrict(`{"a":${nest(5000)}}`),
    { ok: false, reason: 'too_deep' },
    'objects count too',
  );
  t.same(
    parseJsonStrict(`{"s":"${'['.repeat(5000)}"}`),
    { ok: true, value: { s: '['.repeat(5000) } },
    'brackets in strings do not count',
  );
  t.same(
    parseJsonStrict(`{"s":"\\"${'{'.repeat(100)}"}`),
    { ok: true, value: { s: `"${'{'.repeat(100)}` } },
    'escaped quotes',
  );
  t.end();
});

void t.test('parseJsonStrict refuses a duplicate member and points at it (RFC 7493)', (t) => {
  t.same(parseJsonStrict('{"amount":1,"amount":1000000}'), {
    ok: false,
    reason: 'duplicate_member',
    path: ['amount'],
  });
  t.same(
    parseJsonStrict('{"a":[{"x":1},{"b":{"c":1,"\\u0063":2}}]}'),
    { ok: false, reason: 'duplicate_member', path: ['a', 1, 'b', 'c'] },
    'nested in arrays and objects, compared after unescaping',
  );
  t.same(parseJsonStrict('{"a/b~c":1,"a/b~c":2}'), {
    ok: false,
    reason: 'duplicate_member',
    path: ['a/b~c'],
  });
  t.same(
    parseJsonStrict('{"a":{"x":1},"b":{"x":1}}'),
    {
      ok: true,
      value: { a: { x: 1 }, b: { x: 1 } },
    },
    'the same name in two objects is no duplicate',
  );
  t.end();
});

void t.test('a JSON pointer escapes ~ and / (RFC 6901)', (t) => {
  t.equal(jsonPointer([]), '');
  t.equal(jsonPointer(['amount']), '/amount');
  t.equal(jsonPointer(['a', 1, 'b']), '/a/1/b');
  t.equal(jsonPointer(['a/b~c']), '/a~1b~0c');
  t.end();
});

void t.test('a number a double reads as another whole number is found on its text', (t) => {
  for (const token of [
    '0.99999999999999999',
    '99.999999999999999999',
    '1.0000000000000001',
    '-1.0000000000000001',
    '10000000000000001e-16',
    '1e-400',
    '9007199254740993',
    '-9007199254740993',
    '18014398509481985e0',
    '1e23',
    '1e300',
  ]) {
    t.equal(readsAsAnotherInteger(token), true, `${token} is not what a double reads`);
  }
  for (const token of [
    '0',
    '-0',
    '0.0e5',
    '1',
    '150.000',
    '1.5e2',
    '15000e-2',
    '9007199254740991',
    '9007199254740992',
    '1e22',
    '1.5',
    '0.1',
    '1e400',
    '123456789012345',
  ]) {
    t.equal(readsAsAnotherInteger(token), false, `${token} is exact or no whole number`);
  }
  t.equal(findInexactInteger('{"a":"0.99999999999999999","b":[1,2.5,true]}'), undefined);
  t.same(findInexactInteger('{"a\\"":1,"b\\u0063":[1,{"x":1.0000000000000001}]}'), ['bc', 1, 'x']);
  t.same(findInexactInteger('0.99999999999999999'), [], 'a bare number');
  t.same(parseJsonStrict('{"amount":0.99999999999999999}'), {
    ok: false,
    reason: 'inexact_number',
    path: ['amount'],
  });
  t.end();
});

void t.test(
  'a number with a megabyte of zeros is judged at once: the work grows with its length, not its square',
  { timeout: 10_000 },
  (t) => {
    // Quadratic in the run of zeros, this took 97 s for 320 KB on two
    // cores; any body up to the default 1mb limit must not hold the loop.
    const zeros = '0'.repeat(1_000_000);
    const started = Date.now();
    const fraction = parseJsonStrict(`{"a":1.${zeros}1}`);
    t.match(fraction, { ok: false, reason: 'inexact_number', path: ['a'] });
    const whole = parseJsonStrict(`{"a":1${zeros.slice(0, 300)}.${zeros}}`);
    t.match(whole, { ok: false, reason: 'inexact_number' });
    t.ok(readsAsAnotherInteger(`1.${zeros}1`));
    t.notOk(readsAsAnotherInteger(`150.${zeros}`), 'a zero fraction, however long, is exact');
    t.comment(`judged in ${String(Date.now() - started)} ms`);
    t.end();
  },
);
