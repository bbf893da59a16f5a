/**
 * The one-pass duplicate check (members counted in the text against own
 * properties of the parsed value) agrees with the tokenizer's, on random
 * JSON texts built to hold duplicates often: few member names, the same
 * name spelt with and without escapes, strings holding colons, quotes and
 * backslashes, nesting in objects and arrays. A fresh seed every run;
 * `SEED=` (or `DUPLICATES_SEED=`) repeats one.
 */
import t from 'tap';
import { describeSeed, pickSeed, randomSequence } from '../../test/harness/seed.js';
import {
  findDuplicateMember,
  hasDuplicateMembers,
  membersCollapsed,
} from '../http/idempotency/canonical.js';
import { parseJsonStrict } from './index.js';

const CASES = 5_000;
/** Names, some the same name spelt another way. */
const NAMES = ['a', '\\u0061', 'b', 'a:b', 'q\\"', '\\\\', '__proto__', 'c', '\\u0063', ''];
const STRINGS = ['x', 'a:1', '\\"', ':', '\\\\:', '{\\"a\\":1}', '', '\\u003a'];

function text(next: () => number, depth: number): string {
  const roll = next();
  if (depth > 3 || roll < 0.3) {
    const leaf = next();
    if (leaf < 0.4) return `"${STRINGS[Math.floor(next() * STRINGS.length)]!}"`;
    if (leaf < 0.7) return String(Math.floor(next() * 1000) - 500);
    return leaf < 0.85 ? 'true' : 'null';
  }
  const n = Math.floor(next() * 4);
  const items = Array.from({ length: n }, () => text(next, depth + 1));
  if (roll < 0.55) return `[${items.join(',')}]`;
  const members = items.map((v) => `"${NAMES[Math.floor(next() * NAMES.length)]!}" : ${v}`);
  return `{${members.join(' ,')}}`;
}

void t.test('one pass over the text finds what the tokenizer finds', (t) => {
  const seed = pickSeed('DUPLICATES_SEED');
  t.comment(describeSeed(seed));
  const next = randomSequence(seed.value);
  let withDuplicate = 0;
  let mismatches = 0;
  for (let i = 0; i < CASES; i++) {
    const json = text(next, 0);
    const value: unknown = JSON.parse(json);
    const tokenized = findDuplicateMember(json) !== undefined;
    if (tokenized) withDuplicate++;
    const onePass = membersCollapsed(json, value);
    if (onePass !== tokenized || hasDuplicateMembers(json, { value }) !== tokenized) {
      mismatches++;
      if (mismatches <= 3) t.fail(`${json}: tokenizer ${String(tokenized)}, one pass not`);
    }
  }
  t.equal(mismatches, 0, `${String(CASES)} texts, ${String(withDuplicate)} with a duplicate`);
  t.ok(withDuplicate > CASES / 10, 'the cases hold duplicates often');
  t.ok(withDuplicate < CASES - CASES / 10, 'and often none');
  t.end();
});

void t.test('with the parsed value, a duplicate is still named by its path', (t) => {
  const json = '{"x":[{"a":1,"\\u0061":2}],"y":"a:b"}';
  t.same(findDuplicateMember(json, { value: JSON.parse(json) }), ['x', 0, 'a']);
  t.equal(findDuplicateMember('{"a":"b:c","c":{"d":":"}}', { value: {} }), undefined, 'no extra');
  const refused = parseJsonStrict('{"amount":1,"to":{"id":"x","id":"y"}}');
  t.same(refused, { ok: false, reason: 'duplicate_member', path: ['to', 'id'] });
  t.end();
});
