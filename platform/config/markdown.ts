// Renders the configuration reference (docs/operations/configuration.md) from
// the schema, so the document cannot drift from what the loader accepts.
import { CONFIG_GROUPS, CONFIG_KEYS, ConfigSchema, envVarName, leafAnnotations } from './schema.js';
import type { ConfigDefault, ConfigKeyInfo } from './schema.js';

/**
 * Makes text safe inside a Markdown table cell: a pipe would end the cell and
 * a line break the row.
 *
 * @param text - cell content
 * @returns the content with pipes escaped and line breaks turned into spaces
 */
export function escapeCell(text: string): string {
  return text.replaceAll('|', '\\|').replace(/\s*\n\s*/g, ' ');
}

/** Shows a default as it would be written in a config file. */
function defaultCell(value: ConfigDefault): string {
  return value === '' ? '`""`' : `\`${String(value)}\``;
}

/** One table row per key. */
function row(info: ConfigKeyInfo): string {
  const cells = [
    `\`${info.key}\``,
    `\`${info.env}\``,
    escapeCell(info.type),
    defaultCell(info.default),
    escapeCell(info.description),
  ];
  return `| ${cells.join(' | ')} |`;
}

/** The intro: sources, precedence, naming and syntax, worded from live schema facts. */
function intro(): string[] {
  // The port's phrase is reached through the typed schema, so renaming the key
  // fails to compile instead of leaving a stale example; the tests check that
  // the example line is exactly what the loader prints.
  const portExpected = leafAnnotations(ConfigSchema.properties.http.properties.port).meta.expected;
  const prefixes = CONFIG_GROUPS.map((group) => `\`${group.toUpperCase()}__\``).join(', ');
  return [
    '# Configuration',
    '',
    '<!-- Generated from the schema in platform/config by `make docs`; edit the schema, not this file. -->',
    '',
    'Every setting of the server is a named key in dotted snake case, grouped by',
    'its first segment (`database.lock_timeout` belongs to the `database` group).',
    "The schema in platform/config holds each key's type, default and description;",
    'this page is generated from it.',
    '',
    '## Sources and precedence',
    '',
    'A key takes its value from the last of these sources that sets it (later wins):',
    '',
    '1. the default listed below;',
    '2. the JSON config file named by the `--config <path>` flag, with keys nested by group;',
    '3. the environment variable of the key.',
    '',
    'A config file sets any subset of the keys:',
    '',
    '```json',
    '{ "database": { "lock_timeout": "2s" }, "http": { "port": 8080 } }',
    '```',
    '',
    'In a config file, integers are JSON numbers and every other value is a JSON',
    'string. A key the schema does not know is an error.',
    '',
    '## Environment variables',
    '',
    "A key's variable is the key upper-cased with each `.` turned into `__`:",
    `\`database.lock_timeout\` is set by \`${envVarName('database.lock_timeout')}\`, \`http.port\` by \`${envVarName('http.port')}\`.`,
    'A variable that starts with a group prefix but names no key is an error,',
    'which catches typos; other variables are ignored. The group prefixes are',
    `${prefixes}. Integers are written in decimal digits with an optional`,
    'leading minus sign; anything else',
    '(`1.5`, `12x`, an empty value) is refused.',
    '',
    '## Value syntax',
    '',
    '- Durations are an integer followed, with no space, by one of the units',
    '  ms, s, m, h, d (milliseconds, seconds, minutes, hours, days): `500ms`,',
    '  `5s`, `24h`. Where `0ms` is allowed it turns the limit off.',
    '- Sizes are an integer followed, with no space, by one of the units',
    '  b, kb, mb, gb: `100b`, `512kb`, `1mb`. A kilobyte is 1024 bytes.',
    '- Units are written in lower case.',
    '',
    '## Errors',
    '',
    'A bad value stops start-up. Every problem is reported at once, one line',
    'each, naming the key, the source and the value:',
    '',
    '```text',
    `Invalid configuration: http.port = "abc" (from environment ${envVarName('http.port')}): expected ${portExpected}`,
    '```',
    '',
    '## Keys',
  ];
}

/** One heading and table per group, in schema order. */
function tables(): string[] {
  return CONFIG_GROUPS.flatMap((group) => [
    '',
    `### ${group}`,
    '',
    '| key | environment variable | type | default | description |',
    '| --- | --- | --- | --- | --- |',
    ...CONFIG_KEYS.filter((info) => info.group === group).map(row),
  ]);
}

/**
 * Renders the configuration reference, docs/operations/configuration.md, from
 * the schema: a title, an intro on sources, precedence, variable naming and
 * value syntax, then one table per group with each key's environment
 * variable, type, default and description. The output is deterministic (no
 * dates, schema order) so a check can compare it with the committed file.
 *
 * @returns the full Markdown text, ending with one newline
 */
export function renderConfigurationMarkdown(): string {
  return [...intro(), ...tables()].join('\n') + '\n';
}
