/**
 * The body kept for a retry is what `structuredClone` makes of it, for
 * parsed JSON (copied by hand) and for anything else (handed on), and it
 * shares nothing with the body the handler may change.
 */
import t from 'tap';
import { cloneBody } from './clone.js';

void t.test('a parsed JSON body is copied deeply, equal to structuredClone', (t) => {
  const texts = [
    '{"amount":1,"from_account_id":"a","to_account_id":"b"}',
    '[1,"x",null,true,false,{"a":[{"b":{}}]},[],-0.5]',
    '{"__proto__":{"polluted":1},"constructor":2}',
    '"text"',
    '12',
    'null',
    `${'['.repeat(70)}1${']'.repeat(70)}`,
  ];
  for (const text of texts) {
    const body: unknown = JSON.parse(text);
    const copied = cloneBody(body);
    t.same(copied, structuredClone(body), text.slice(0, 40));
    t.strictSame(JSON.stringify(copied), JSON.stringify(body));
    if (typeof body === 'object' && body !== null) t.not(copied, body, 'a new object');
  }
  const polluted = cloneBody(JSON.parse('{"__proto__":{"polluted":1}}')) as Record<string, unknown>;
  t.equal(Object.getPrototypeOf(polluted), Object.prototype, 'the prototype is not replaced');
  t.same(Object.keys(polluted), ['__proto__'], 'the member is kept as a member');
  t.equal(
    ({} as Record<string, unknown>)['polluted'],
    undefined,
    'nothing leaks into Object.prototype',
  );
  t.end();
});

void t.test('a change to the body after the copy does not reach the copy', (t) => {
  const body = JSON.parse('{"a":{"b":[1,2]}}') as { a: { b: number[] } };
  const copied = cloneBody(body) as { a: { b: number[] } };
  body.a.b.push(3);
  body.a = { b: [] };
  t.same(copied, { a: { b: [1, 2] } });
  t.end();
});

void t.test('what is not plain JSON is copied by structuredClone', (t) => {
  const at = new Date('2026-01-01T00:00:00Z');
  const withDate = cloneBody({ at }) as { at: Date };
  t.ok(withDate.at instanceof Date);
  t.not(withDate.at, at);
  const bytes = cloneBody(Buffer.from('abc')) as Uint8Array;
  t.same([...bytes], [97, 98, 99]);
  const cycle: Record<string, unknown> = { a: 1 };
  cycle['self'] = cycle;
  const copiedCycle = cloneBody(cycle) as Record<string, unknown>;
  t.equal(copiedCycle['self'], copiedCycle, 'a cycle stays a cycle');
  const bare = Object.assign(Object.create(null) as Record<string, unknown>, { a: 1 });
  t.same(cloneBody(bare), structuredClone(bare));
  // eslint-disable-next-line no-sparse-arrays
  const holes = [1, , 3];
  t.same(cloneBody(holes), structuredClone(holes));
  t.equal(cloneBody(10n), 10n);
  t.throws(() => cloneBody({ f: () => 1 }), { name: 'DataCloneError' });
  t.end();
});
