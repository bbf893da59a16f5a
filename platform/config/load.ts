// Loads the configuration from schema defaults, an optional JSON file and the
// environment, checks every value against the schema and reports all problems
// at once, so an operator fixes a broken deployment in one round.
import { readFileSync } from 'node:fs';
import { Value } from 'typebox/value';
import { CONFIG_GROUPS, CONFIG_KEYS, ConfigSchema } from './schema.js';
import type { Config, ConfigKeyInfo } from './schema.js';
import { parseStrictDecimal, parseStrictInteger } from './units.js';

/** Where a value came from; later sources win. */
export type ConfigSource =
  | { readonly kind: 'default' }
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'env'; readonly name: string };

/** One thing wrong with the configuration. */
export interface ConfigProblem {
  /** Dotted key concerned (as written, even when unknown); null for problems with the file as a whole. */
  readonly key: string | null;
  /** Source label: `default`, `file <path>` or `environment <NAME>`. */
  readonly source: string;
  /** The full explanation, naming key, source and bad value. */
  readonly message: string;
}

/**
 * Thrown by {@link loadConfig} when the configuration is invalid. The message
 * has one line per problem, each starting with `Invalid configuration: `, for
 * example `Invalid configuration: http.port = "abc" (from environment
 * HTTP__PORT): expected an integer from 0 to 65535`.
 */
export class ConfigError extends Error {
  /** Every problem found, in a stable order: file structure, unknown variables, then keys in schema order. */
  readonly problems: readonly ConfigProblem[];

  /**
   * @param problems - the problems to report; at least one
   */
  constructor(problems: readonly ConfigProblem[]) {
    super(problems.map((problem) => `Invalid configuration: ${problem.message}`).join('\n'));
    this.name = 'ConfigError';
    this.problems = Object.freeze([...problems]);
  }
}

/** Input of {@link loadConfig}. */
export interface LoadConfigInput {
  /** Environment variables; undefined values count as unset. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Path of a JSON config file (the `--config` flag), relative to the working directory or absolute. */
  readonly file?: string;
}

/**
 * Labels a source the way messages show it.
 *
 * @param source - where a value came from
 * @returns `default`, `file <path>` or `environment <NAME>`
 */
export function describeSource(source: ConfigSource): string {
  switch (source.kind) {
    case 'default':
      return 'default';
    case 'file':
      return `file ${source.path}`;
    case 'env':
      return `environment ${source.name}`;
  }
}

const MAX_RENDERED = 120;

/**
 * Shows a value in a message: as JSON, with the password of any URL masked
 * (connection URLs carry them and messages end up in logs), and cut short so
 * one huge value cannot flood the log.
 *
 * @param value - a value read from a file or the environment
 * @returns its display form
 */
export function renderValue(value: unknown): string {
  const json = JSON.stringify(value).replace(/(\/\/[^/@:\s]*:)[^@/\s]*@/g, '$1***@');
  return json.length > MAX_RENDERED ? `${json.slice(0, MAX_RENDERED - 3)}...` : json;
}

/** A value offered for a key by one source. */
interface Candidate {
  readonly source: ConfigSource;
  readonly value: unknown;
  /** What the operator wrote: the environment string rather than the integer read from it. */
  readonly written: unknown;
}

/** The values offered for one key, in precedence order; the last one wins. */
interface Slot {
  readonly info: ConfigKeyInfo;
  readonly candidates: Candidate[];
  winner: Candidate;
}

const ENV_PREFIXES = CONFIG_GROUPS.map((group) => `${group.toUpperCase()}__`);

/** True for a plain JSON object (not an array or null). */
function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Names the JSON type of a value for messages: `an array`, `null`, `a string`. */
function jsonTypeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}

/** Collects values and problems while the sources are read; one per load, so loads share no state. */
class Collector {
  readonly structureProblems: ConfigProblem[] = [];
  readonly envProblems: ConfigProblem[] = [];
  /** Slots in schema order. */
  readonly slots: readonly Slot[] = CONFIG_KEYS.map((info) => {
    const fallback: Candidate = {
      source: { kind: 'default' },
      value: info.default,
      written: info.default,
    };
    return { info, candidates: [fallback], winner: fallback };
  });
  readonly byKey = new Map(this.slots.map((slot) => [slot.info.key, slot]));
  readonly byEnv = new Map(this.slots.map((slot) => [slot.info.env, slot]));

  offer(slot: Slot, candidate: Candidate): void {
    slot.candidates.push(candidate);
    slot.winner = candidate;
  }
}

/** Reads the JSON config file, offering its values and noting structural problems. */
function readFile(path: string, collector: Collector): void {
  const source: ConfigSource = { kind: 'file', path };
  const label = describeSource(source);
  const fileProblem = (message: string): void => {
    collector.structureProblems.push({ key: null, source: label, message });
  };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    fileProblem(`config file ${path} cannot be read: ${(error as Error).message}`);
    return;
  }
  let data: unknown;
  try {
    // Editors on some systems save a byte order mark, which JSON.parse refuses.
    data = JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch (error) {
    fileProblem(`config file ${path} is not valid JSON: ${(error as Error).message}`);
    return;
  }
  if (!isObject(data)) {
    fileProblem(`config file ${path} must hold a JSON object, not ${jsonTypeName(data)}`);
    return;
  }
  for (const [groupName, groupValue] of Object.entries(data)) {
    const keyProblem = (key: string, message: string): void => {
      collector.structureProblems.push({ key, source: label, message });
    };
    if (!CONFIG_GROUPS.includes(groupName)) {
      const flat = collector.byKey.get(groupName)?.info;
      keyProblem(
        groupName,
        flat === undefined
          ? `unknown key ${groupName} (from ${label}): known groups: ${CONFIG_GROUPS.join(', ')}`
          : `unknown key ${groupName} (from ${label}): nest keys by group, as in {"${flat.group}": {"${flat.name}": ...}}`,
      );
      continue;
    }
    if (!isObject(groupValue)) {
      keyProblem(
        groupName,
        `${groupName} = ${renderValue(groupValue)} (from ${label}): expected an object of ${groupName} keys`,
      );
      continue;
    }
    for (const [name, value] of Object.entries(groupValue)) {
      const key = `${groupName}.${name}`;
      const slot = collector.byKey.get(key);
      if (slot === undefined) {
        const known = CONFIG_KEYS.filter((other) => other.group === groupName).map(
          (other) => other.key,
        );
        keyProblem(
          key,
          `unknown key ${key} (from ${label}): known ${groupName} keys: ${known.join(', ')}`,
        );
        continue;
      }
      collector.offer(slot, { source, value, written: value });
    }
  }
}

/**
 * Reads the environment. Names under a group prefix must be known keys, which
 * catches typos that would otherwise leave a default silently in force;
 * everything else in the environment belongs to someone else and is ignored.
 */
function readEnv(env: LoadConfigInput['env'], collector: Collector): void {
  // Sorted so problems come out in the same order whatever the environment's order.
  for (const name of Object.keys(env).sort()) {
    const text = env[name];
    if (text === undefined) continue;
    const source: ConfigSource = { kind: 'env', name };
    const slot = collector.byEnv.get(name);
    if (slot !== undefined) {
      // A string that is not an integer, a ratio or a boolean stays a
      // string, so the schema refuses it.
      const value =
        slot.info.kind === 'integer'
          ? (parseStrictInteger(text) ?? text)
          : slot.info.kind === 'ratio'
            ? (parseStrictDecimal(text) ?? text)
            : slot.info.kind === 'boolean'
              ? parseStrictBoolean(text)
              : text;
      collector.offer(slot, { source, value, written: text });
      continue;
    }
    const prefix = ENV_PREFIXES.find((candidate) => name.startsWith(candidate));
    if (prefix === undefined) continue;
    const key = name.toLowerCase().replaceAll('__', '.');
    const known = CONFIG_KEYS.filter((other) => other.env.startsWith(prefix)).map(
      (other) => other.env,
    );
    collector.envProblems.push({
      key,
      source: describeSource(source),
      message: `unknown key ${key} (from ${describeSource(source)}): known ${prefix} variables: ${known.join(', ')}`,
    });
  }
}

/** Reads exactly `true` or `false`; anything else stays the string written. */
function parseStrictBoolean(text: string): boolean | string {
  return text === 'true' ? true : text === 'false' ? false : text;
}

/** Freezes the loaded configuration so no module can change what another one reads. */
function freeze(config: Config): Config {
  for (const group of Object.values(config)) Object.freeze(group);
  return Object.freeze(config);
}

/**
 * Loads the configuration. Sources, later wins: the schema defaults, the JSON
 * config file (nested by group, `{"database": {"lock_timeout": "2s"}}`), then
 * environment variables named after the key (`DATABASE__LOCK_TIMEOUT`). Every
 * value from every source is checked, including values a later source
 * overrides, since those would break the next deployment that drops the
 * override. Pure apart from reading the file: the caller passes the environment.
 *
 * @param input - the environment and, optionally, the config file path
 * @returns the typed, frozen configuration, durations in milliseconds and sizes in bytes
 * @throws ConfigError listing every problem: bad values, unknown keys in the
 *   file, unknown variables under a known prefix (`HTTP__PROT`), a missing,
 *   unreadable or malformed file
 * @example
 * const config = loadConfig({ env: { HTTP__PORT: '8080' }, file: 'config.json' });
 * config.database.lock_timeout; // 5000
 */
export function loadConfig(input: LoadConfigInput): Config {
  const collector = new Collector();
  if (input.file !== undefined) readFile(input.file, collector);
  readEnv(input.env, collector);

  const valueProblems: ConfigProblem[] = [];
  const raw: Record<string, Record<string, unknown>> = {};
  for (const { info, candidates, winner } of collector.slots) {
    for (const { source, value, written } of candidates) {
      if (Value.Check(info.schema, value)) continue;
      const label = describeSource(source);
      valueProblems.push({
        key: info.key,
        source: label,
        message: `${info.key} = ${renderValue(written)} (from ${label}): expected ${info.expected}`,
      });
    }
    const group = (raw[info.group] ??= {});
    group[info.name] = winner.value;
  }

  const problems = [...collector.structureProblems, ...collector.envProblems, ...valueProblems];
  if (problems.length > 0) throw new ConfigError(problems);
  return freeze(Value.Decode(ConfigSchema, raw));
}

/**
 * Loads the configuration for the running process: the server's entry point
 * calls this so that nothing outside this module reads `process.env`.
 *
 * @param argvConfigPath - the value of the `--config` flag, if given
 * @returns the typed, frozen configuration
 * @throws ConfigError as {@link loadConfig} does
 */
export function loadConfigFromProcess(argvConfigPath?: string): Config {
  return loadConfig(
    argvConfigPath === undefined
      ? { env: process.env }
      : { env: process.env, file: argvConfigPath },
  );
}
