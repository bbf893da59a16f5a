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

void t.test('unknown members that use up the scan budget are still listed', (t) => {
  // TypeBox stops after its budget of findings (the server sets 1,000; the
  // default is 8): one per unknown member comes first, and the summary
  // that named them came after, so a body of more unknown members than
  // the budget was refused with nothing listed, or only a missing member.
  const body: Record<string, unknown> = { amount: 0 };
  for (let i = 0; i < 1200; i++) body[`u${String(i)}`] = 1;
  body['x/y'] = 1;
  const errors = validate(body).error as { keyword: string; instancePath: string }[];
  t.ok(errors.length >= 8, `listed as far as the budget went (${String(errors.length)})`);
  t.match(errors[0], {
    keyword: 'additionalProperties',
    instancePath: '/u0',
    params: { additionalProperty: 'u0' },
  });
  t.equal(new Set(errors.map((e) => e.instancePath)).size, errors.length, 'each once');
  t.end();
});

void t.test('an unknown member named by both kinds of finding is listed once', (t) => {
  const errors = validate({ amount: 1, 'x/y': 1, z: 2 }).error as { instancePath: string }[];
  t.same(
    errors.map((e) => e.instancePath),
    ['/x~1y', '/z'],
  );
  t.end();
});
