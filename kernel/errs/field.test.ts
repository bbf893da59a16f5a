import t from 'tap';
import { codePoints, invalidField } from './index.js';

void t.test('codePoints counts a surrogate pair as one', (t) => {
  t.equal(codePoints(''), 0);
  t.equal(codePoints('abc'), 3);
  t.equal(codePoints('a\u{1F600}b'), 3, 'three code points in four UTF-16 units');
  t.end();
});

void t.test('invalidField names the field in a validation_failed problem', (t) => {
  const error = invalidField('#body/name', 'min_length', 'name must not be empty.');
  t.equal(error.code, 'validation_failed');
  t.equal(error.status, 400);
  t.equal(error.detail, 'name must not be empty.');
  t.same(error.errors, [
    { pointer: '#body/name', code: 'min_length', detail: 'name must not be empty.' },
  ]);
  t.end();
});
