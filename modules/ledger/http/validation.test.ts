import t from 'tap';
import { Type } from 'typebox';
import { strictValidatorCompiler, toValidationErrors } from './validation.js';

const Body = Type.Object(
  { amount: Type.Integer({ minimum: 1 }), 'a/b~c': Type.Optional(Type.String()) },
  { additionalProperties: false },
);

function validate(value: unknown) {
  const validator = strictValidatorCompiler({
    schema: Body,
    method: 'POST',
    url: '/x',
    httpPart: 'body',
  });
  return validator(value) as { value?: unknown; error?: unknown };
}

void t.test('values pass exactly as sent, never coerced', (t) => {
  const body = { amount: 5 };
  t.equal(validate(body).value, body, 'the same object');
  for (const amount of ['5', true, null, [5], 5.5, 0]) {
    t.ok(validate({ amount }).error, `${JSON.stringify(amount)} is refused`);
  }
  t.end();
});

void t.test('findings are shaped like the default validator reports them', (t) => {
  t.same(validate({}).error, [
    {
      keyword: 'required',
      instancePath: '',
      schemaPath: '#',
      params: { missingProperty: 'amount' },
      message: "must have required property 'amount'",
    },
  ]);
  t.match(validate({ amount: 1, currency: 'x', 'x/y': 1 }).error, [
    {
      keyword: 'additionalProperties',
      instancePath: '/currency',
      params: { additionalProperty: 'currency' },
    },
    {
      keyword: 'additionalProperties',
      instancePath: '/x~1y',
      params: { additionalProperty: 'x/y' },
    },
  ]);
  t.equal((validate({ amount: 1, currency: 'x' }).error as unknown[]).length, 1, 'no duplicate');
  t.match(validate({ amount: 0 }).error, [{ keyword: 'minimum', instancePath: '/amount' }]);
  t.end();
});

void t.test('toValidationErrors ignores malformed lists of names', (t) => {
  t.same(
    toValidationErrors([
      { keyword: 'required', schemaPath: '#', instancePath: '', params: {}, message: 'm' },
      {
        keyword: 'additionalProperties',
        schemaPath: '#',
        instancePath: '',
        params: { additionalProperties: [1, 'a~b'] },
        message: 'm',
      },
    ]),
    [
      {
        keyword: 'additionalProperties',
        instancePath: '/a~0b',
        schemaPath: '#',
        params: { additionalProperty: 'a~b' },
        message: 'must not be present',
      },
    ],
  );
  t.end();
});
