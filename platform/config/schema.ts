// The configuration schema: every key with its type, default and description.
// The loader, its error messages and the generated reference document all read
// this one schema, so adding a key here is the whole job (then `make docs`).
import { Type } from 'typebox';
import type { StaticDecode, StaticEncode, TProperties, TSchema } from 'typebox';
import {
  DURATION_PATTERN,
  SIZE_PATTERN,
  formatDuration,
  formatSize,
  parseDuration,
  parseSize,
  requireDuration,
  requireSize,
} from './units.js';

/** The kinds of value a key can hold; they decide how an environment string is read. */
export type ConfigValueKind =
  'string' | 'integer' | 'ratio' | 'boolean' | 'enum' | 'duration' | 'size';

/**
 * What the loader, its messages and the reference document need beyond plain
 * JSON Schema. Kept on each leaf schema (under {@link META}) so the schema
 * stays the single source.
 */
export interface ConfigLeafMeta {
  /** How the value is written and read from the environment. */
  readonly kind: ConfigValueKind;
  /** Short type label for the reference table, for example `integer, 0 to 65535`. */
  readonly type: string;
  /** Phrase completing "expected ..." in error messages. */
  readonly expected: string;
  /** True when values may hold a password: whoever logs the configuration must mask them. */
  readonly secret: boolean;
}

/** Schema keyword under which each leaf keeps its {@link ConfigLeafMeta}. */
export const META = 'x-config';

const DURATION_SYNTAX = 'a duration (an integer followed by ms, s, m, h or d)';
const SIZE_SYNTAX = 'a size (an integer followed by b, kb, mb or gb)';

/**
 * PostgreSQL's timeout settings and Node.js timers hold at most 2^31 - 1 ms
 * (about 24.8 days); 24d is the largest whole number of days below that.
 */
const MAX_TIMER = '24d';

interface LeafOptions<Default> {
  readonly default: Default;
  readonly description: string;
}

/** Builds the annotations every leaf carries. */
function annotations(options: LeafOptions<unknown>, meta: ConfigLeafMeta): Record<string, unknown> {
  return { default: options.default, description: options.description, [META]: meta };
}

/** Range wording shared by integers, durations and sizes. */
function range(
  min: string,
  max: string | undefined,
): { readonly type: string; readonly expected: string } {
  return max === undefined
    ? { type: `at least ${min}`, expected: `of at least ${min}` }
    : { type: `${min} to ${max}`, expected: `from ${min} to ${max}` };
}

/** A free-form string that must not be empty: an empty name, host or path can only be a mistake. */
function text(options: LeafOptions<string>) {
  const meta: ConfigLeafMeta = {
    kind: 'string',
    type: 'non-empty string',
    expected: 'a non-empty string',
    secret: false,
  };
  return Type.String({ ...annotations(options, meta), minLength: 1 });
}

/**
 * A PostgreSQL connection URL or "" for "not set". Only the scheme is checked:
 * the driver reports anything else with more precision than a pattern could.
 */
function postgresUrl(options: LeafOptions<string>) {
  const meta: ConfigLeafMeta = {
    kind: 'string',
    type: 'string, empty or a postgres:// URL',
    expected: 'an empty string or a URL starting with postgres:// or postgresql://',
    secret: true,
  };
  return Type.String({ ...annotations(options, meta), pattern: '^$|^postgres(ql)?://' });
}

/** A whole number in a closed range; without `maximum` the bound is the largest exact double. */
function integer(
  options: LeafOptions<number> & { readonly minimum: number; readonly maximum?: number },
) {
  const words = range(String(options.minimum), options.maximum?.toString());
  const meta: ConfigLeafMeta = {
    kind: 'integer',
    type: `integer, ${words.type}`,
    expected: `an integer ${words.expected}`,
    secret: false,
  };
  return Type.Integer({
    ...annotations(options, meta),
    minimum: options.minimum,
    maximum: options.maximum ?? Number.MAX_SAFE_INTEGER,
  });
}

/** A share from 0 to 1: a JSON number in a file, a decimal (`0.25`) in the environment. */
function ratio(options: LeafOptions<number>) {
  const meta: ConfigLeafMeta = {
    kind: 'ratio',
    type: 'number, 0 to 1',
    expected: 'a number from 0 to 1 (for example 0.25)',
    secret: false,
  };
  return Type.Number({ ...annotations(options, meta), minimum: 0, maximum: 1 });
}

/**
 * An http:// or https:// URL of a host name, an IPv4 address or a bracketed
 * IPv6 address, an optional port and path: what the exporter's URL parser
 * takes, so a value it would refuse at start-up is refused here, naming
 * the key.
 */
function httpUrl(options: LeafOptions<string>) {
  const meta: ConfigLeafMeta = {
    kind: 'string',
    type: 'http:// or https:// URL',
    expected: 'an http:// or https:// URL of a host, an optional port and a path',
    secret: false,
  };
  return Type.String({
    ...annotations(options, meta),
    pattern: '^https?://([A-Za-z0-9.-]+|\\[[0-9A-Fa-f:.]+\\])(:[0-9]{1,5})?(/[^\\s%]*)?$',
  });
}

/** A switch: JSON `true` or `false` in a file, the strings `true` or `false` in the environment. */
function flag(options: LeafOptions<boolean>) {
  const meta: ConfigLeafMeta = {
    kind: 'boolean',
    type: 'boolean',
    expected: 'true or false',
    secret: false,
  };
  return Type.Boolean(annotations(options, meta));
}

/**
 * An absolute URL path of plain segments (letters, digits, `.`, `_`, `~`,
 * `-`), with no trailing slash. Route syntax (`:name`, `*`), queries and
 * empty segments are refused: the value becomes a route of the HTTP server.
 */
const URL_PATH_PATTERN = '^(/[A-Za-z0-9._~-]+)+$';

/** A path a route is served on; see {@link URL_PATH_PATTERN}. */
function urlPath(options: LeafOptions<string>) {
  const meta: ConfigLeafMeta = {
    kind: 'string',
    type: 'URL path, starting with /',
    expected:
      'a path starting with / made of segments of letters, digits, ".", "_", "~" and "-", without a trailing slash',
    secret: false,
  };
  return Type.String({ ...annotations(options, meta), pattern: URL_PATH_PATTERN });
}

/** One of a fixed list of strings. */
function oneOf<const Values extends string[]>(
  values: readonly [...Values],
  options: LeafOptions<Values[number]>,
) {
  const list = `one of ${values.join(', ')}`;
  const meta: ConfigLeafMeta = { kind: 'enum', type: list, expected: list, secret: false };
  return Type.Enum(values, annotations(options, meta));
}

/** An extra condition on a duration, with the words that explain it. */
interface DurationRule {
  /** Short wording for the reference table. */
  readonly type: string;
  /** Phrase completing "expected a duration of ...". */
  readonly expected: string;
  readonly check: (ms: number) => boolean;
}

/**
 * A duration written as `<integer><unit>` in files and the environment and
 * decoded to milliseconds. `min` and `max` are duration strings too, so the
 * messages show them the way an operator writes them.
 */
function duration(
  options: LeafOptions<string> & {
    readonly min: string;
    readonly max?: string;
    readonly rule?: DurationRule;
  },
) {
  const minMs = requireDuration(options.min);
  const maxMs = options.max === undefined ? Number.MAX_SAFE_INTEGER : requireDuration(options.max);
  const words = range(options.min, options.max);
  const rule = options.rule;
  const meta: ConfigLeafMeta =
    rule === undefined
      ? {
          kind: 'duration',
          type: `duration, ${words.type}`,
          expected: `${DURATION_SYNTAX} ${words.expected}`,
          secret: false,
        }
      : {
          kind: 'duration',
          type: `duration, ${rule.type}`,
          expected: `a duration of ${rule.expected}`,
          secret: false,
        };
  const codec = Type.Codec(
    Type.String({ ...annotations(options, meta), pattern: DURATION_PATTERN }),
  )
    .Decode((value) => requireDuration(value))
    .Encode((ms) => formatDuration(ms));
  return Type.Refine(
    codec,
    (value) => {
      const ms = parseDuration(value);
      return ms !== undefined && ms >= minMs && ms <= maxMs && (rule?.check(ms) ?? true);
    },
    () => meta.expected,
  );
}

/** A size written as `<integer><unit>` and decoded to bytes. */
function size(options: LeafOptions<string> & { readonly min: string }) {
  const minBytes = requireSize(options.min);
  const words = range(options.min, undefined);
  const meta: ConfigLeafMeta = {
    kind: 'size',
    type: `size, ${words.type}`,
    expected: `${SIZE_SYNTAX} ${words.expected}`,
    secret: false,
  };
  const codec = Type.Codec(Type.String({ ...annotations(options, meta), pattern: SIZE_PATTERN }))
    .Decode((value) => requireSize(value))
    .Encode((bytes) => formatSize(bytes));
  return Type.Refine(
    codec,
    (value) => {
      const bytes = parseSize(value);
      return bytes !== undefined && bytes >= minBytes;
    },
    () => meta.expected,
  );
}

/** Divisors of `n` below `n`, ascending. */
function properDivisors(n: number): number[] {
  return Array.from({ length: n - 1 }, (_, index) => index + 1).filter((d) => n % d === 0);
}

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;

/**
 * The cleanup job runs from a crontab, and a cron step repeats evenly only
 * when it divides its field's cycle: a step of N minutes needs N to divide 60,
 * a step of N hours needs N to divide 24. Any other interval would be uneven
 * at the turn of each hour or day, so it is refused rather than rounded.
 */
const CRON_STEP_RULE: DurationRule = {
  type: 'whole minutes dividing 60 or whole hours dividing 24',
  expected:
    'whole minutes that divide 60 (' +
    properDivisors(60)
      .map((m) => `${m}m`)
      .join(', ') +
    ') or whole hours that divide 24 (' +
    [...properDivisors(24), 24].map((h) => `${h}h`).join(', ') +
    ')',
  check: (ms) =>
    (ms % MINUTE_MS === 0 && 60 % (ms / MINUTE_MS) === 0) ||
    (ms % HOUR_MS === 0 && 24 % (ms / HOUR_MS) === 0),
};

/** A group of keys: unknown members are refused, which catches typos in config files. */
function group<const Properties extends TProperties>(properties: Properties) {
  return Type.Object(properties, { additionalProperties: false });
}

/**
 * The configuration schema. Each group is an object of keys; each key holds
 * its type, default, description and loader metadata. Durations and sizes are
 * codecs: their encoded form is the string an operator writes, their decoded
 * form a number of milliseconds or bytes.
 */
export const ConfigSchema = Type.Object(
  {
    app: group({
      name: text({
        default: 'idempotent-api',
        description:
          'Name of the service, shown in every log line and as the title of the API document.',
      }),
    }),
    http: group({
      host: text({
        default: '127.0.0.1',
        description:
          'Address the HTTP listener binds to: 127.0.0.1 accepts local connections only, 0.0.0.0 every IPv4 interface.',
      }),
      port: integer({
        default: 3000,
        description: 'TCP port of the HTTP listener; 0 lets the operating system pick a free port.',
        minimum: 0,
        maximum: 65_535,
      }),
      body_limit: size({
        default: '1mb',
        description:
          'Largest request body accepted where a route sets no limit of its own; a larger body is refused with 413.',
        min: '1b',
      }),
      rate_limit_max: integer({
        default: 100,
        description:
          'Requests one principal may make per window, and one client address for every request without a valid token (anonymous calls, refused tokens, unknown paths, the API document, the metrics route; /healthz and /readyz are exempt). Counters live in each process, so the limit applies per instance.',
        minimum: 1,
      }),
      rate_limit_window: duration({
        default: '1m',
        description: 'Length of the window over which http.rate_limit_max is counted.',
        min: '1ms',
        max: MAX_TIMER,
      }),
      request_timeout: duration({
        default: '30s',
        description:
          'Longest time a client may take to send a whole request, head and body; a slower one (a stalled or trickled body) gets 408 request_timeout and its connection is closed.',
        min: '1s',
        max: MAX_TIMER,
      }),
      headers_timeout: duration({
        default: '10s',
        description:
          'Longest time a client may take to send the head of a request; a slower one gets 408 request_timeout. A value over http.request_timeout counts as http.request_timeout.',
        min: '1s',
        max: MAX_TIMER,
      }),
      keep_alive_timeout: duration({
        default: '5s',
        description:
          'How long an idle keep-alive connection stays open waiting for the next request.',
        min: '1ms',
        max: MAX_TIMER,
      }),
      socket_timeout: duration({
        default: '90s',
        description:
          'Longest a connection may go without a byte received or sent, a request in progress included: a client that stops reading its answer is closed after it, freeing the answer and its file descriptors. Keep it above database.transaction_timeout, the longest a handler may work without a byte on its connection.',
        min: '1s',
        max: MAX_TIMER,
      }),
      max_connections: integer({
        default: 1024,
        description:
          'Connections one process accepts at once; a connection over the limit is closed as soon as it is accepted. Also bounded by the file descriptors the process may open.',
        minimum: 1,
      }),
      max_pipelined_requests: integer({
        default: 16,
        description:
          'Requests one connection may have waiting for their answers at once (HTTP/1.1 pipelining). A client that sends more without reading the answers has its connection closed, unanswered, so it cannot make the process hold answers without bound; its unanswered requests may be sent again (with their Idempotency-Key).',
        minimum: 1,
      }),
    }),
    database: group({
      url: postgresUrl({
        default: '',
        description:
          'Connection URL of the application role the server connects as. Empty starts the embedded PostgreSQL 18 server. Role api also takes a host list (postgres://u:p@h1:5432,h2:5432/db?target_session_attrs=read-write); roles worker and all take one host (the job queue connects with node-postgres): give them one address that follows the primary. May hold a password: treat it as a secret.',
      }),
      owner_url: postgresUrl({
        default: '',
        description:
          'Connection URL of the owner role that runs migrations. Leave it empty with the embedded server, which creates both roles. May hold a password: treat it as a secret.',
      }),
      pool_max: integer({
        default: 10,
        description: 'Most connections the connection pool opens to the database.',
        minimum: 1,
        maximum: 1_000,
      }),
      lock_timeout: duration({
        default: '5s',
        description:
          'Longest a statement waits for a lock, set at the start of every transaction; also how long a repeated request waits on its idempotency key. 0ms disables the limit.',
        min: '0ms',
        max: MAX_TIMER,
      }),
      statement_timeout: duration({
        default: '30s',
        description:
          'Longest a single statement may run, set at the start of every transaction. 0ms disables the limit.',
        min: '0ms',
        max: MAX_TIMER,
      }),
      transaction_timeout: duration({
        default: '60s',
        description:
          'Longest a whole transaction may stay open, set at the start of every transaction. 0ms disables the limit.',
        min: '0ms',
        max: MAX_TIMER,
      }),
      connect_timeout: duration({
        default: '5s',
        description:
          'Longest opening a database connection may take, the TCP connection and the sign-in together; a refused or stalled connect fails after it and the request gets 503 with Retry-After.',
        min: '100ms',
        max: '5m',
      }),
      tx_retry_max: integer({
        default: 3,
        description:
          'How many times a transaction is retried, with jittered backoff, after a serialization failure, a deadlock or a lock timeout. 0 turns retries off.',
        minimum: 0,
        maximum: 20,
      }),
      embedded_data_dir: text({
        default: '.data/pg',
        description:
          'Data directory of the embedded server, relative to the working directory, kept between runs of `make run`. Used only when database.url is empty.',
      }),
      embedded_port: integer({
        default: 0,
        description:
          'TCP port of the embedded server; 0 picks a free port. Used only when database.url is empty.',
        minimum: 0,
        maximum: 65_535,
      }),
    }),
    identity: group({
      token_cache_ttl: duration({
        default: '5s',
        description:
          'How long an api process may answer a bearer token from memory after reading it from the database; 0s reads api_tokens on every request. Revoking a token or disabling a principal reaches every process at once over LISTEN/NOTIFY; this bounds how stale an entry can be should that feed fail unnoticed. A heartbeat through the feed every second turns the cache off within about two seconds when the feed stops hearing, and while the feed is down every request reads the database. Each process holds two more connections for it (the listener and its heartbeat).',
        min: '0ms',
        max: '60s',
      }),
      token_cache_size: integer({
        default: 10_000,
        description:
          'Most tokens one process keeps in its token cache; the least recently used goes first.',
        minimum: 1,
        maximum: 1_000_000,
      }),
    }),
    sync: group({
      idempotency_key_ttl: duration({
        default: '24h',
        description:
          'How long a stored idempotency key and its response are kept; a repeat after that runs as a new request.',
        min: '1ms',
      }),
      idempotency_cleanup_interval: duration({
        default: '1h',
        description:
          'How often the cleanup job deletes expired idempotency keys. It runs from a cron schedule, so the value must be whole minutes that divide 60 or whole hours that divide 24.',
        min: '1m',
        max: '24h',
        rule: CRON_STEP_RULE,
      }),
      idempotency_cleanup_batch_size: integer({
        default: 5_000,
        description:
          'Most expired idempotency keys one cleanup statement deletes, which keeps each transaction short.',
        minimum: 1,
        maximum: 100_000,
      }),
      idempotency_cleanup_pacing: integer({
        default: 2,
        description:
          'How much the cleanup job yields to traffic: after a batch slower than the fastest batch of the run (because requests compete for the database), it pauses this many times the difference, at most one second. Alone it runs at full speed; 0 never pauses.',
        minimum: 0,
        maximum: 100,
      }),
      idempotency_replay_cache_ttl: duration({
        default: '60s',
        description:
          "How long an api process may answer a repeat of a completed idempotency key from memory after storing its answer or meeting its row; 0s turns memory off, and every repeat is decided by the key's insert in a short transaction. A completed key never changes until it expires, and no entry is served past its expiry; this bounds how long a key deleted by hand goes on being replayed by a process that read it.",
        min: '0ms',
        max: '1h',
      }),
      idempotency_replay_cache_size: integer({
        default: 10_000,
        description:
          'Most completed idempotency keys one process keeps in its replay cache (answers of at most 4 KiB of JSON each); the least recently used goes first.',
        minimum: 1,
        maximum: 1_000_000,
      }),
    }),
    log: group({
      level: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
        default: 'info',
        description: 'Lowest level written to the log; silent writes nothing.',
      }),
    }),
    metrics: group({
      enabled: flag({
        default: true,
        description:
          'Serve metrics in the Prometheus text format, where metrics.listener says (role worker: always on a listener of its own). false serves no metrics route at all.',
      }),
      listener: oneOf(['api', 'own'], {
        default: 'api',
        description:
          'Where roles api and all serve metrics: api on the HTTP listener at metrics.path (public like the API: no token needed, rate limited per address; it shows the Node.js version, request counts by route and the idempotency_keys row count, no principal data), own on a listener of its own at http.host and metrics.port, kept off the API address. Role worker always serves on its own listener.',
      }),
      path: urlPath({
        default: '/metrics',
        description:
          'Path the metrics are served on, without authentication, on the HTTP listener or on the metrics listener of its own.',
      }),
      port: integer({
        default: 9464,
        description:
          'TCP port of the metrics listener of its own (role worker, and roles api and all with metrics.listener own), bound on http.host; 0 lets the operating system pick a free port.',
        minimum: 0,
        maximum: 65_535,
      }),
      key_stats_min_interval: duration({
        default: '10s',
        description:
          'Shortest time between two reads of the idempotency_keys gauges (row count, oldest expired age); scrapes in between get the last values, so frequent or hostile scrapes cost the database nothing. 0ms reads on every scrape.',
        min: '0ms',
        max: MAX_TIMER,
      }),
      process_metrics: flag({
        default: true,
        description:
          'Also export the Node.js process metrics (CPU time, memory, event loop lag, garbage collection, handles) under the process_ and nodejs_ prefixes.',
      }),
    }),
    tracing: group({
      enabled: flag({
        default: false,
        description:
          "Make OpenTelemetry traces: an HTTP server span per request and the idempotency plugin's spans (docs/operations/tracing.md), sent in batches to tracing.endpoint; a request's W3C traceparent header makes its spans part of the caller's trace. false registers no SDK, and the plugin's spans cost the API's no-op.",
      }),
      endpoint: httpUrl({
        default: 'http://127.0.0.1:4318/v1/traces',
        description:
          'OTLP/HTTP traces URL the spans are sent to, as JSON (an OpenTelemetry Collector listens on port 4318). What is buffered is sent on shutdown; spans an endpoint does not take are dropped, never retried into memory without bound.',
      }),
      sampling_ratio: ratio({
        default: 1,
        description:
          'Share of traces kept, from 0 (none) to 1 (all), decided by trace id: for a trace a request starts (no traceparent) and for one whose traceparent says sampled (the client sends every attempt of an intent as sampled, in one trace, so an intent is kept or dropped whole); a traceparent that says not sampled is not kept, whatever this says.',
      }),
    }),
  },
  { additionalProperties: false },
);

/** The schema's type, for code that needs to name it. */
export type ConfigSchemaType = typeof ConfigSchema;

/**
 * Configuration in the form it is written: durations and sizes as strings
 * (`"5s"`, `"1mb"`). This is the shape of a config file with every key set.
 */
export type RawConfig = StaticEncode<ConfigSchemaType>;

type DecodedConfig = StaticDecode<ConfigSchemaType>;

/**
 * The loaded configuration, grouped like the keys (`config.database.lock_timeout`).
 * Durations are numbers of milliseconds and sizes numbers of bytes; everything
 * else keeps its written type. Read-only: one object is shared by all modules.
 */
export type Config = {
  readonly [Group in keyof DecodedConfig]: {
    readonly [Key in keyof DecodedConfig[Group]]: DecodedConfig[Group][Key];
  };
};

/** A default in its written form: a string, a number or a boolean. */
export type ConfigDefault = string | number | boolean;

/** Everything known about one key, flattened from the schema for loaders and documents. */
export interface ConfigKeyInfo {
  /** Dotted key, for example `database.lock_timeout`. */
  readonly key: string;
  /** First segment of the key, for example `database`. */
  readonly group: string;
  /** The rest of the key, for example `lock_timeout`. */
  readonly name: string;
  /** Environment variable that sets it, for example `DATABASE__LOCK_TIMEOUT`. */
  readonly env: string;
  /** How the value is written. */
  readonly kind: ConfigValueKind;
  /** Short type label for the reference table. */
  readonly type: string;
  /** Phrase completing "expected ..." in error messages. */
  readonly expected: string;
  /** Default in its written form (`"5s"`, not 5000). */
  readonly default: ConfigDefault;
  /** What the key does. */
  readonly description: string;
  /** True when values may hold a password. */
  readonly secret: boolean;
  /** The key's own schema, which checks one value in its written form. */
  readonly schema: TSchema;
}

/**
 * Names the environment variable of a key: upper case, with each `.` turned
 * into `__` because most shells refuse dots in variable names.
 *
 * @param key - dotted key, for example `database.lock_timeout`
 * @returns the variable name, for example `DATABASE__LOCK_TIMEOUT`
 */
export function envVarName(key: string): string {
  return key.toUpperCase().replaceAll('.', '__');
}

/**
 * Reads the annotations of a leaf schema built by this module.
 *
 * @param schema - a leaf of {@link ConfigSchema}
 * @returns its metadata, default and description
 * @throws Error when the schema was not built by this module's helpers, which
 *   is a programming error in the schema
 */
export function leafAnnotations(schema: TSchema): {
  readonly meta: ConfigLeafMeta;
  readonly default: ConfigDefault;
  readonly description: string;
} {
  const record = schema as Partial<
    Record<typeof META, ConfigLeafMeta> & { default: ConfigDefault; description: string }
  >;
  const { [META]: meta, default: fallback, description } = record;
  if (meta === undefined || fallback === undefined || description === undefined) {
    throw new Error('configuration leaf lacks its default, description or metadata');
  }
  return { meta, default: fallback, description };
}

/**
 * Every key of {@link ConfigSchema} in schema order, flattened for loaders,
 * messages and documents.
 */
export const CONFIG_KEYS: readonly ConfigKeyInfo[] = Object.freeze(
  Object.entries(ConfigSchema.properties).flatMap(([groupName, groupSchema]) =>
    Object.entries(groupSchema.properties as Record<string, TSchema>).map(
      ([name, schema]): ConfigKeyInfo => {
        const { meta, default: fallback, description } = leafAnnotations(schema);
        const key = `${groupName}.${name}`;
        return Object.freeze({
          key,
          group: groupName,
          name,
          env: envVarName(key),
          kind: meta.kind,
          type: meta.type,
          expected: meta.expected,
          default: fallback,
          description,
          secret: meta.secret,
          schema,
        });
      },
    ),
  ),
);

/** Group names in schema order. */
export const CONFIG_GROUPS: readonly string[] = Object.freeze(Object.keys(ConfigSchema.properties));
