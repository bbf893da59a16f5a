import t from 'tap';
import {
  formatDuration,
  formatSize,
  parseDuration,
  parseSize,
  parseStrictDecimal,
  parseStrictInteger,
  requireDuration,
  requireSize,
} from './units.js';

void t.test('parseDuration converts every unit to milliseconds', (t) => {
  t.equal(parseDuration('0ms'), 0);
  t.equal(parseDuration('500ms'), 500);
  t.equal(parseDuration('5s'), 5_000);
  t.equal(parseDuration('2m'), 120_000);
  t.equal(parseDuration('24h'), 86_400_000);
  t.equal(parseDuration('7d'), 604_800_000);
  t.equal(parseDuration('007s'), 7_000, 'leading zeros are still a whole number');
  t.end();
});

void t.test('parseDuration refuses anything but <integer><unit>', (t) => {
  for (const text of [
    '',
    '5',
    's',
    '1.5s',
    '-1s',
    '+1s',
    ' 5s',
    '5s ',
    '5 s',
    '5S',
    '5sec',
    '5w',
    '1h30m',
    '0x10s',
    '1e3ms',
  ]) {
    t.equal(parseDuration(text), undefined, JSON.stringify(text));
  }
  t.end();
});

void t.test('parseDuration refuses values beyond exact integer arithmetic', (t) => {
  t.equal(parseDuration('9007199254740991ms'), Number.MAX_SAFE_INTEGER);
  t.equal(parseDuration('9007199254740992ms'), undefined);
  t.equal(parseDuration('99999999999999999999d'), undefined);
  t.end();
});

void t.test('parseSize converts every unit to bytes with binary multiples', (t) => {
  t.equal(parseSize('100b'), 100);
  t.equal(parseSize('512kb'), 524_288);
  t.equal(parseSize('1mb'), 1_048_576);
  t.equal(parseSize('2gb'), 2_147_483_648);
  t.equal(parseSize('0b'), 0);
  t.end();
});

void t.test('parseSize refuses malformed sizes', (t) => {
  for (const text of ['', '1', 'mb', '1.5mb', '-1kb', '1MB', '1 mb', '1k', '1tb', '1mib']) {
    t.equal(parseSize(text), undefined, JSON.stringify(text));
  }
  t.equal(parseSize('99999999999999999999gb'), undefined);
  t.end();
});

void t.test('parseStrictInteger accepts only plain decimal integers', (t) => {
  t.equal(parseStrictInteger('0'), 0);
  t.equal(parseStrictInteger('3000'), 3000);
  t.equal(parseStrictInteger('-1'), -1);
  t.equal(parseStrictInteger('0042'), 42);
  for (const text of [
    '',
    ' ',
    'abc',
    '1.5',
    '12x',
    ' 12',
    '12 ',
    '+12',
    '1e3',
    '0x10',
    '-',
    '1_000',
    'Infinity',
    'NaN',
    '9007199254740992',
  ]) {
    t.equal(parseStrictInteger(text), undefined, JSON.stringify(text));
  }
  t.end();
});

void t.test('formatDuration picks the largest unit that is exact', (t) => {
  t.equal(formatDuration(0), '0ms');
  t.equal(formatDuration(500), '500ms');
  t.equal(formatDuration(1_500), '1500ms');
  t.equal(formatDuration(5_000), '5s');
  t.equal(formatDuration(90_000), '90s');
  t.equal(formatDuration(60_000), '1m');
  t.equal(formatDuration(3_600_000), '1h');
  t.equal(formatDuration(86_400_000), '1d');
  t.equal(formatDuration(90_000_000), '25h');
  t.equal(formatDuration(2_073_600_000), '24d');
  t.end();
});

void t.test('formatSize picks the largest unit that is exact', (t) => {
  t.equal(formatSize(0), '0b');
  t.equal(formatSize(100), '100b');
  t.equal(formatSize(1_536), '1536b');
  t.equal(formatSize(524_288), '512kb');
  t.equal(formatSize(1_048_576), '1mb');
  t.equal(formatSize(3_221_225_472), '3gb');
  t.end();
});

void t.test('format and parse round-trip', (t) => {
  for (const ms of [0, 1, 999, 1_000, 61_000, 3_600_000, 172_800_000]) {
    t.equal(parseDuration(formatDuration(ms)), ms, `${ms}ms`);
  }
  for (const bytes of [0, 1, 1_023, 1_024, 1_048_576, 1_073_741_824]) {
    t.equal(parseSize(formatSize(bytes)), bytes, `${bytes}b`);
  }
  t.end();
});

void t.test('format functions refuse values that are not whole non-negative numbers', (t) => {
  t.throws(() => formatDuration(-1), RangeError);
  t.throws(() => formatDuration(1.5), RangeError);
  t.throws(() => formatSize(Number.NaN), RangeError);
  t.end();
});

void t.test('require variants return the number or throw a RangeError naming the text', (t) => {
  t.equal(requireDuration('5s'), 5_000);
  t.equal(requireSize('1kb'), 1_024);
  t.throws(() => requireDuration('5x'), { name: 'RangeError', message: /"5x"/ });
  t.throws(() => requireSize('5x'), { name: 'RangeError', message: /"5x"/ });
  t.end();
});

void t.test('parseStrictDecimal reads digits with an optional fraction, nothing else', (t) => {
  t.equal(parseStrictDecimal('0'), 0);
  t.equal(parseStrictDecimal('1'), 1);
  t.equal(parseStrictDecimal('0.25'), 0.25);
  t.equal(parseStrictDecimal('12.5'), 12.5);
  for (const bad of ['', '.5', '5.', '-1', '+1', '1e3', ' 1', '1 ', '0x1', 'Infinity', '01']) {
    t.equal(parseStrictDecimal(bad), undefined, JSON.stringify(bad));
  }
  t.end();
});
