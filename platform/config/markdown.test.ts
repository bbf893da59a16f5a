import t from 'tap';
import { CONFIG_KEYS, loadConfig, renderConfigurationMarkdown } from './index.js';
import { escapeCell } from './markdown.js';

void t.test('the document starts with a title and ends with one newline', (t) => {
  const text = renderConfigurationMarkdown();
  t.match(text, /^# Configuration\n/);
  t.match(text, /[^\n]\n$/);
  t.end();
});

void t.test('the intro explains sources, precedence, naming and syntax', (t) => {
  const text = renderConfigurationMarkdown();
  t.match(text, '--config');
  t.match(text, 'later wins');
  t.match(text, 'DATABASE__LOCK_TIMEOUT');
  t.match(text, 'ms, s, m, h, d');
  t.match(text, 'b, kb, mb, gb');
  t.match(text, 'make docs');
  t.end();
});

void t.test('every key appears in a table row with its environment variable', (t) => {
  const text = renderConfigurationMarkdown();
  for (const info of CONFIG_KEYS) {
    const row = text.split('\n').find((line) => line.startsWith(`| \`${info.key}\` |`));
    t.ok(row, `${info.key} has a row`);
    t.match(row, `| \`${info.env}\` |`, `${info.key} row names ${info.env}`);
    t.match(row, escapeCell(info.description), `${info.key} row holds its description`);
  }
  t.end();
});

void t.test('one table per group, each under its own heading, in schema order', (t) => {
  const text = renderConfigurationMarkdown();
  const headings = text.split('\n').filter((line) => line.startsWith('### '));
  t.same(headings, [
    '### app',
    '### http',
    '### database',
    '### identity',
    '### sync',
    '### log',
    '### metrics',
    '### tracing',
  ]);
  t.ok(text.indexOf('## Keys') < text.indexOf('### app'), 'the tables follow the intro');
  const headers = text
    .split('\n')
    .filter((line) => line === '| key | environment variable | type | default | description |');
  t.equal(headers.length, 8);
  t.end();
});

void t.test('defaults and types are shown as written in a config file', (t) => {
  const text = renderConfigurationMarkdown();
  t.match(text, '| `http.port` | `HTTP__PORT` | integer, 0 to 65535 | `3000` |');
  t.match(text, '| `database.url` | `DATABASE__URL` | string, empty or a postgres:// URL | `""` |');
  t.match(
    text,
    '| `database.lock_timeout` | `DATABASE__LOCK_TIMEOUT` | duration, 0ms to 24d | `5s` |',
  );
  t.match(text, '| `http.body_limit` | `HTTP__BODY_LIMIT` | size, at least 1b | `1mb` |');
  t.match(
    text,
    '| `log.level` | `LOG__LEVEL` | one of fatal, error, warn, info, debug, trace, silent | `info` |',
  );
  t.match(text, '| `metrics.enabled` | `METRICS__ENABLED` | boolean | `true` |');
  t.match(text, '| `tracing.sampling_ratio` | `TRACING__SAMPLING_RATIO` | number, 0 to 1 | `1` |');
  t.end();
});

void t.test('the example error in the intro is what the loader really says', (t) => {
  const text = renderConfigurationMarkdown();
  let message = '';
  try {
    loadConfig({ env: { HTTP__PORT: 'abc' } });
  } catch (error) {
    message = (error as Error).message;
  }
  t.match(message, /^Invalid configuration: /);
  t.match(text, `\n${message}\n`);
  t.end();
});

void t.test('the output is deterministic and free of en and em dashes', (t) => {
  const first = renderConfigurationMarkdown();
  t.equal(renderConfigurationMarkdown(), first);
  t.notMatch(first, /[\u2013\u2014]/);
  t.notMatch(first, /\d{4}-\d{2}-\d{2}/, 'no dates');
  t.end();
});

void t.test('escapeCell keeps a table cell on one line and its pipes literal', (t) => {
  t.equal(escapeCell('a | b'), 'a \\| b');
  t.equal(escapeCell('one\ntwo'), 'one two');
  t.equal(escapeCell('plain'), 'plain');
  t.end();
});
