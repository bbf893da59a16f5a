/**
 * The body kept for a retry is what `structuredClone` makes of it, for
 * parsed JSON (copied by hand) and for anything else (handed on), and it
 * shares nothing with the body the handler may change.
 */
import { execFileSync } from 'node:child_process';
import t from 'tap';
import { projectRoot } from '../../migrate/index.js';
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

void t.test('an object reached twice keeps its sharing, as structuredClone keeps it', (t) => {
  const shared = { amount: 1 };
  const body = { p: shared, q: shared, list: [shared] };
  const copied = cloneBody(body) as { p: object; q: object; list: object[] };
  t.equal(copied.p, copied.q, 'one object under two members stays one');
  t.equal(copied.list[0], copied.p);
  t.not(copied.p, shared);
  // Twenty-four levels of two members each naming the level below: a walk
  // of the tree would visit 2^24 nodes; the copy keeps the 25 objects.
  let dag: unknown = [1];
  for (let i = 0; i < 24; i++) dag = { a: dag, b: dag };
  const copiedDag = cloneBody(dag) as { a: unknown; b: unknown };
  t.equal(copiedDag.a, copiedDag.b, 'the levels stay shared');
  t.end();
});

void t.test('members named like Object.prototype properties survive a frozen prototype', (t) => {
  // Frozen in a process of its own: this one's prototype stays as it is.
  const script = [
    "const { cloneBody } = await import('./platform/http/idempotency/clone.ts');",
    'Object.freeze(Object.prototype);',
    'const body = JSON.parse(\'{"toString":"x","constructor":1,"hasOwnProperty":[2],"amount":5}\');',
    'process.stdout.write(JSON.stringify(cloneBody(body)));',
  ].join('\n');
  const out = execFileSync(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', script],
    { cwd: projectRoot(), encoding: 'utf8' },
  );
  t.same(JSON.parse(out), { toString: 'x', constructor: 1, hasOwnProperty: [2], amount: 5 });
  t.end();
});
