import t from 'tap';
import { idTimestamp, isUuid, isUuidV7, newId, parseId } from './index.js';

const v7 = '01890a5d-ac96-774b-bcce-b302099a8057';
const v4 = '3b241101-e2bb-4255-8caf-4136c566a962';

void t.test('newId makes canonical lower-case UUIDv7 values', (t) => {
  for (let i = 0; i < 200; i += 1) {
    const id = newId();
    t.ok(isUuidV7(id), `${id} is a UUIDv7`);
    t.equal(id, id.toLowerCase());
    t.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  }
  t.end();
});

void t.test('newId without a date stamps the current time', (t) => {
  const before = Date.now();
  const id = newId();
  const after = Date.now();
  const stamp = idTimestamp(id).getTime();
  t.ok(stamp >= before && stamp <= after, `${stamp} within [${before}, ${after}]`);
  t.end();
});

void t.test('timestamp round trip', (t) => {
  const dates = [
    new Date(0),
    new Date('2024-02-29T12:34:56.789Z'),
    new Date('2031-07-01T00:00:00.001Z'),
    new Date(2 ** 48 - 1),
  ];
  for (const date of dates) {
    const id = newId(date);
    t.equal(idTimestamp(id).getTime(), date.getTime(), date.toISOString());
  }
  t.equal(idTimestamp(parseId(v7)).toISOString(), '2023-06-30T03:34:18.518Z');
  t.end();
});

void t.test('ids created in one millisecond sort in creation order', (t) => {
  const at = new Date('2025-01-02T03:04:05.006Z');
  const ids = Array.from({ length: 10_000 }, () => newId(at));
  const sorted = [...ids].sort();
  t.same(sorted, ids, 'lexical order equals creation order');
  t.equal(new Set(ids).size, ids.length, 'all distinct');
  // Past the per-millisecond counter the stamp may run ahead, but never far.
  const last = ids.at(-1)!;
  t.ok(idTimestamp(last).getTime() - at.getTime() < 10, 'stamp stays close');
  t.equal(idTimestamp(ids[0]!).getTime(), at.getTime());
  t.end();
});

void t.test('ids keep their order when time moves on while the counter ran ahead', (t) => {
  const at = Date.parse('2026-03-04T05:06:07.000Z');
  const ids = Array.from({ length: 6_000 }, () => newId(new Date(at)));
  // The next real millisecond may still be behind the borrowed stamp.
  ids.push(newId(new Date(at + 1)));
  ids.push(newId(new Date(at + 1)));
  t.same([...ids].sort(), ids);
  const later = newId(new Date(at + 60_000));
  t.equal(idTimestamp(later).getTime(), at + 60_000, 'a later millisecond gets its exact stamp');
  t.end();
});

void t.test('a clock that steps back gets its exact stamp', (t) => {
  const at = Date.parse('2027-01-01T00:00:00.000Z');
  newId(new Date(at));
  const earlier = newId(new Date(at - 5_000));
  t.equal(idTimestamp(earlier).getTime(), at - 5_000);
  t.end();
});

void t.test('ids created one after another without a date are ordered', (t) => {
  const ids = Array.from({ length: 2_000 }, () => newId());
  t.same([...ids].sort(), ids);
  t.end();
});

void t.test('newId refuses dates it cannot encode', (t) => {
  t.throws(() => newId(new Date(Number.NaN)), TypeError);
  t.throws(() => newId(new Date(-1)), RangeError);
  t.throws(() => newId(new Date(2 ** 48)), RangeError);
  t.end();
});

void t.test('isUuidV7', (t) => {
  t.ok(isUuidV7(v7));
  t.ok(isUuidV7(v7.toUpperCase()), 'upper case accepted');
  for (const variant of ['8', '9', 'a', 'b', 'A', 'B']) {
    t.ok(isUuidV7(`01890a5d-ac96-774b-${variant}cce-b302099a8057`), `variant ${variant}`);
  }
  t.notOk(isUuidV7(v4), 'v4 refused');
  t.notOk(isUuidV7('01890a5d-ac96-774b-ccce-b302099a8057'), 'variant 110 refused');
  t.notOk(isUuidV7('01890a5d-ac96-774b-7cce-b302099a8057'), 'variant 0 refused');
  t.notOk(isUuidV7('01890a5d-ac96-774b-bcce-b302099a805'), 'too short');
  t.notOk(isUuidV7('01890a5d-ac96-774b-bcce-b302099a80577'), 'too long');
  t.notOk(isUuidV7('01890a5dac96774bbcceb302099a8057'), 'dashes missing');
  t.notOk(isUuidV7('01890a5d-ac96774b-bcce-b302099a8057'), 'one dash missing');
  t.notOk(isUuidV7('01890a5-dac96-774b-bcce-b302099a8057'), 'dash misplaced');
  t.notOk(isUuidV7('01890a5g-ac96-774b-bcce-b302099a8057'), 'non-hex');
  t.notOk(isUuidV7(`{${v7}}`), 'braces refused');
  t.notOk(isUuidV7(`"${v7}"`), 'quotes refused');
  t.notOk(isUuidV7(` ${v7}`), 'leading space refused');
  t.notOk(isUuidV7(`${v7}\n`), 'trailing newline refused');
  t.notOk(isUuidV7(''), 'empty refused');
  t.end();
});

void t.test('parseId', (t) => {
  t.equal(parseId(v7), v7);
  t.equal(parseId(v7.toUpperCase()), v7, 'upper case normalised');
  t.equal(parseId('01890A5D-AC96-774B-BCCE-B302099A8057'), v7);
  t.throws(() => parseId(v4), new TypeError(`not a UUIDv7: "${v4}"`));
  t.throws(() => parseId('nope'), { name: 'TypeError', message: /"nope"/ });
  const long = 'x'.repeat(10_000);
  t.throws(
    () => parseId(long),
    { name: 'TypeError', message: /^not a UUIDv7: "x{64}"\.\.\. \(10000 characters\)$/ },
    'a long value is cut short in the message',
  );
  t.throws(
    () => parseId('\u0000\n'),
    { message: 'not a UUIDv7: "\\u0000\\n"' },
    'control characters escaped',
  );
  t.end();
});

void t.test('isUuid accepts any RFC 9562 uuid', (t) => {
  t.ok(isUuid(v7));
  t.ok(isUuid(v4));
  t.ok(isUuid(v4.toUpperCase()));
  for (const version of ['1', '2', '3', '4', '5', '6', '7', '8']) {
    t.ok(isUuid(`3b241101-e2bb-${version}255-8caf-4136c566a962`), `version ${version}`);
  }
  t.ok(isUuid('00000000-0000-0000-0000-000000000000'), 'nil');
  t.ok(isUuid('ffffffff-ffff-ffff-ffff-ffffffffffff'), 'max');
  t.ok(isUuid('FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF'), 'max, upper case');
  t.notOk(isUuid('3b241101-e2bb-0255-8caf-4136c566a962'), 'version 0 refused');
  t.notOk(isUuid('3b241101-e2bb-9255-8caf-4136c566a962'), 'version 9 refused');
  t.notOk(isUuid('3b241101-e2bb-4255-ccaf-4136c566a962'), 'bad variant refused');
  t.notOk(isUuid('3b241101-e2bb-4255-4caf-4136c566a962'), 'NCS variant refused');
  t.notOk(isUuid('3b241101e2bb42558caf4136c566a962'), 'dashes missing');
  t.notOk(isUuid('3b241101-e2bb-4255-8caf-4136c566a96'), 'too short');
  t.notOk(isUuid('3b241101-e2bb-4255-8caf-4136c566a96z'), 'non-hex');
  t.notOk(isUuid(''), 'empty');
  t.end();
});

void t.test('idTimestamp refuses a value that is not a UUIDv7', (t) => {
  // A cast can smuggle any string past the brand; the stamp would be noise.
  t.throws(() => idTimestamp(v4 as never), TypeError);
  t.end();
});
