import t from 'tap';
import { isAppError } from '../../../kernel/errs/index.js';
import { etagOf, readIfMatch } from './if-match.js';

void t.test('etagOf quotes the version as a strong entity tag', (t) => {
  t.equal(etagOf(1), '"1"');
  t.equal(etagOf(42), '"42"');
  t.end();
});

void t.test('readIfMatch reads the versions of the strong tags', (t) => {
  t.same(readIfMatch(undefined), { kind: 'missing' });
  t.same(readIfMatch('*'), { kind: 'any' });
  t.same(readIfMatch(' * '), { kind: 'any' });
  t.same(readIfMatch('"3"'), { kind: 'versions', versions: [3] });
  t.same(readIfMatch('"3", "5"'), { kind: 'versions', versions: [3, 5] }, 'a list');
  t.same(readIfMatch('"3","5" ,\t"7"'), { kind: 'versions', versions: [3, 5, 7] }, 'spacing');
  t.same(readIfMatch(', "3",, "4" ,'), { kind: 'versions', versions: [3, 4] }, 'empty elements');
  t.same(readIfMatch('W/"3"'), { kind: 'versions', versions: [] }, 'weak tags never match');
  t.same(readIfMatch('W/"3", "4"'), { kind: 'versions', versions: [4] });
  for (const opaque of ['', 'abc', '03', '0', '-1', '1.5', '9007199254740992', 'a,b']) {
    t.same(
      readIfMatch(`"${opaque}"`),
      { kind: 'versions', versions: [] },
      `"${opaque}" is a tag but no version`,
    );
  }
  t.same(
    readIfMatch('"2147483648"'),
    { kind: 'versions', versions: [2147483648] },
    'past 2^31 (bigint column)',
  );
  t.same(
    readIfMatch('"9007199254740991"'),
    { kind: 'versions', versions: [9007199254740991] },
    'the largest',
  );
  t.end();
});

void t.test('readIfMatch refuses what is not a list of entity tags', (t) => {
  for (const header of [
    '',
    ' ',
    ',',
    '3',
    '"3',
    '3"',
    '"3""4"',
    '"3" x',
    'w/"3"',
    '*, "3"',
    '"a"b"',
  ]) {
    try {
      readIfMatch(header);
      t.fail(`${JSON.stringify(header)} was accepted`);
    } catch (err) {
      t.ok(isAppError(err) && err.code === 'validation_failed', JSON.stringify(header));
      t.same(
        isAppError(err) ? err.errors : undefined,
        [{ pointer: '#header/If-Match', code: 'invalid_format' }],
        `${JSON.stringify(header)} names the header`,
      );
    }
  }
  t.end();
});
