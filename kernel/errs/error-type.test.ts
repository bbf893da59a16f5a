/**
 * The `error.type` of a thrown value, as every span of ours records it: a
 * SQLSTATE when the error carries one, else the error's name, else
 * `_OTHER`; a Node.js code of five capitals is no SQLSTATE.
 */
import t from 'tap';
import { errorType, isSqlState } from './error-type.js';

void t.test('a SQLSTATE is five digits or capitals, one at least a digit', (t) => {
  for (const code of ['40001', '55P03', '08006', '57P01', '2BP01', 'XX000', 'P0001']) {
    t.ok(isSqlState(code), code);
  }
  for (const code of [
    'EBADF',
    'EPERM',
    'ECONNRESET',
    '4000',
    '400011',
    '40 01',
    '40o01',
    '',
    'abcde',
  ]) {
    t.notOk(isSqlState(code), `not ${JSON.stringify(code)}`);
  }
  t.end();
});

void t.test('error.type: the SQLSTATE, else the name, else _OTHER', (t) => {
  t.equal(errorType(Object.assign(new Error('x'), { code: '40001' })), '40001');
  t.equal(errorType(Object.assign(new TypeError('x'), { code: 'EBADF' })), 'TypeError');
  t.equal(
    errorType(Object.assign(new Error('x'), { code: 40001 })),
    'Error',
    'a number is no code',
  );
  t.equal(errorType({ name: 'Custom' }), 'Custom');
  t.equal(errorType({ name: '' }), '_OTHER');
  t.equal(errorType({ name: 7 }), '_OTHER');
  for (const thrown of [null, undefined, 'text', 42, Symbol('s')]) {
    t.equal(errorType(thrown), '_OTHER', `for ${String(thrown)}`);
  }
  t.end();
});

void t.test(
  'error.type: a value whose code or name cannot be read is _OTHER, never a throw',
  (t) => {
    const throwingCode = Object.defineProperty(new Error('x'), 'code', {
      get() {
        throw new Error('the getter');
      },
    });
    const throwingName = Object.defineProperty({}, 'name', {
      get() {
        throw new Error('the getter');
      },
    });
    const trap = new Proxy(
      {},
      {
        get() {
          throw new Error('the trap');
        },
      },
    );
    const revocable = Proxy.revocable({}, {});
    revocable.revoke();
    for (const [label, thrown] of [
      ['a throwing code getter', throwingCode],
      ['a throwing name getter', throwingName],
      ['a Proxy whose trap throws', trap],
      ['a revoked Proxy', revocable.proxy],
    ] as const) {
      t.equal(errorType(thrown), '_OTHER', label);
    }
    t.end();
  },
);
