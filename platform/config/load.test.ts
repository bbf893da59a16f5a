import t from 'tap';
import { join } from 'node:path';
import { ConfigError, loadConfig, loadConfigFromProcess } from './index.js';
import type { Config } from './index.js';
import { describeSource, renderValue } from './load.js';

const DEFAULTS: Config = {
  app: { name: 'idempotent-api' },
  http: {
    host: '127.0.0.1',
    port: 3000,
    body_limit: 1_048_576,
    rate_limit_max: 100,
    rate_limit_window: 60_000,
    request_timeout: 30_000,
    headers_timeout: 10_000,
    keep_alive_timeout: 5_000,
    socket_timeout: 90_000,
    max_connections: 1024,
    max_pipelined_requests: 16,
  },
  database: {
    url: '',
    owner_url: '',
    pool_max: 10,
    lock_timeout: 5_000,
    statement_timeout: 30_000,
    transaction_timeout: 60_000,
    connect_timeout: 5_000,
    tx_retry_max: 3,
    embedded_data_dir: '.data/pg',
    embedded_port: 0,
  },
  identity: { token_cache_ttl: 5_000, token_cache_size: 10_000 },
  sync: {
    idempotency_key_ttl: 86_400_000,
    idempotency_cleanup_interval: 3_600_000,
    idempotency_cleanup_batch_size: 5_000,
    idempotency_cleanup_pacing: 2,
    idempotency_replay_cache_ttl: 60_000,
    idempotency_replay_cache_size: 10_000,
  },
  log: { level: 'info' },
  metrics: {
    enabled: true,
    path: '/metrics',
    listener: 'api',
    port: 9464,
    key_stats_min_interval: 10_000,
    process_metrics: true,
  },
  tracing: {
    enabled: false,
    endpoint: 'http://127.0.0.1:4318/v1/traces',
    sampling_ratio: 1,
  },
};

/** The part of a tap test that makes throwaway fixture directories. */
interface Fixtures {
  testdir(content: Record<string, string>): string;
}

/** Runs the loader and returns the ConfigError it must throw. */
function loadError(input: Parameters<typeof loadConfig>[0]): ConfigError {
  try {
    loadConfig(input);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('loadConfig accepted a configuration it should refuse');
}

/** Writes a config file into a fresh test directory and returns its path. */
function configFile(t: Fixtures, content: string): string {
  const dir = t.testdir({ 'config.json': content });
  return join(dir, 'config.json');
}

void t.test('defaults apply when nothing is configured', (t) => {
  const config = loadConfig({ env: {} });
  t.same(config, DEFAULTS);
  t.end();
});

void t.test('the result is deeply frozen', (t) => {
  const config = loadConfig({ env: {} });
  t.ok(Object.isFrozen(config));
  t.ok(Object.isFrozen(config.database));
  t.throws(() => {
    (config.http as { port: number }).port = 1;
  }, TypeError);
  t.end();
});

void t.test('the config file overrides defaults and converts units', (t) => {
  const file = configFile(
    t,
    JSON.stringify({
      app: { name: 'orders' },
      http: { port: 8080, body_limit: '512kb', rate_limit_window: '30s' },
      database: { lock_timeout: '2s', statement_timeout: '0ms', url: 'postgres://app@db/app' },
      sync: { idempotency_key_ttl: '2d' },
      log: { level: 'debug' },
    }),
  );
  const config = loadConfig({ env: {}, file });
  t.equal(config.app.name, 'orders');
  t.equal(config.http.port, 8080);
  t.equal(config.http.body_limit, 524_288);
  t.equal(config.http.rate_limit_window, 30_000);
  t.equal(config.database.lock_timeout, 2_000);
  t.equal(config.database.statement_timeout, 0);
  t.equal(config.database.url, 'postgres://app@db/app');
  t.equal(config.sync.idempotency_key_ttl, 172_800_000);
  t.equal(config.log.level, 'debug');
  t.equal(config.http.host, '127.0.0.1', 'keys absent from the file keep their default');
  t.equal(config.database.transaction_timeout, 60_000);
  t.end();
});

void t.test('environment variables override the config file', (t) => {
  const file = configFile(
    t,
    JSON.stringify({ http: { port: 8080, host: '0.0.0.0' }, database: { lock_timeout: '2s' } }),
  );
  const config = loadConfig({
    env: {
      HTTP__PORT: '9090',
      DATABASE__LOCK_TIMEOUT: '750ms',
      SYNC__IDEMPOTENCY_KEY_TTL: '12h',
      HTTP__BODY_LIMIT: '100b',
      DATABASE__URL: 'postgresql://app:secret@db:5432/app',
      DATABASE__TX_RETRY_MAX: '0',
      LOG__LEVEL: 'silent',
    },
    file,
  });
  t.equal(config.http.port, 9090);
  t.equal(config.http.host, '0.0.0.0', 'file value kept where the environment is silent');
  t.equal(config.database.lock_timeout, 750);
  t.equal(config.sync.idempotency_key_ttl, 43_200_000);
  t.equal(config.http.body_limit, 100);
  t.equal(config.database.url, 'postgresql://app:secret@db:5432/app');
  t.equal(config.database.tx_retry_max, 0);
  t.equal(config.log.level, 'silent');
  t.end();
});

void t.test('an empty environment value sets an empty string where one is allowed', (t) => {
  const file = configFile(t, JSON.stringify({ database: { url: 'postgres://db/app' } }));
  const config = loadConfig({ env: { DATABASE__URL: '' }, file });
  t.equal(config.database.url, '');
  t.end();
});

void t.test('unrelated and undefined environment variables are ignored', (t) => {
  const config = loadConfig({
    env: {
      PATH: '/usr/bin',
      HTTP_PROXY: 'http://proxy',
      HTTPS__PORT: 'x',
      http__port: 'abc',
      DATABASE_URL: 'nonsense',
      HTTP__PORT: undefined,
    },
  });
  t.same(config, DEFAULTS);
  t.end();
});

void t.test('a bad integer names the key, the variable and the value', (t) => {
  const error = loadError({ env: { HTTP__PORT: 'abc' } });
  t.equal(
    error.message,
    'Invalid configuration: http.port = "abc" (from environment HTTP__PORT): expected an integer from 0 to 65535',
  );
  t.equal(error.name, 'ConfigError');
  t.same(error.problems, [
    {
      key: 'http.port',
      source: 'environment HTTP__PORT',
      message:
        'http.port = "abc" (from environment HTTP__PORT): expected an integer from 0 to 65535',
    },
  ]);
  t.end();
});

void t.test('integers from the environment are parsed strictly', (t) => {
  for (const value of ['', '1.5', '12x', ' 12', '+12', '1e3']) {
    const error = loadError({ env: { DATABASE__POOL_MAX: value } });
    t.match(
      error.message,
      `database.pool_max = ${JSON.stringify(value)} (from environment DATABASE__POOL_MAX): expected an integer from 1 to 1000`,
      JSON.stringify(value),
    );
  }
  t.end();
});

void t.test('integers out of range are refused from both sources', (t) => {
  const file = configFile(t, JSON.stringify({ http: { port: 65536 }, database: { pool_max: 0 } }));
  const error = loadError({
    env: { SYNC__IDEMPOTENCY_CLEANUP_BATCH_SIZE: '100001', HTTP__RATE_LIMIT_MAX: '0' },
    file,
  });
  t.match(
    error.message,
    `http.port = 65536 (from file ${file}): expected an integer from 0 to 65535`,
  );
  t.match(
    error.message,
    `database.pool_max = 0 (from file ${file}): expected an integer from 1 to 1000`,
  );
  t.match(
    error.message,
    'sync.idempotency_cleanup_batch_size = "100001" (from environment SYNC__IDEMPOTENCY_CLEANUP_BATCH_SIZE): expected an integer from 1 to 100000',
  );
  t.match(
    error.message,
    'http.rate_limit_max = "0" (from environment HTTP__RATE_LIMIT_MAX): expected an integer of at least 1',
  );
  t.end();
});

void t.test('file values must have the JSON type of their key', (t) => {
  const file = configFile(
    t,
    JSON.stringify({
      http: { port: '3000', host: 5 },
      database: { tx_retry_max: 1.5, lock_timeout: 5000 },
      log: { level: null },
    }),
  );
  const error = loadError({ env: {}, file });
  t.match(
    error.message,
    `http.port = "3000" (from file ${file}): expected an integer from 0 to 65535`,
  );
  t.match(error.message, `http.host = 5 (from file ${file}): expected a non-empty string`);
  t.match(
    error.message,
    `database.tx_retry_max = 1.5 (from file ${file}): expected an integer from 0 to 20`,
  );
  t.match(error.message, `database.lock_timeout = 5000 (from file ${file}): expected a duration`);
  t.match(
    error.message,
    `log.level = null (from file ${file}): expected one of fatal, error, warn`,
  );
  t.end();
});

void t.test('a bad duration is refused', (t) => {
  const error = loadError({
    env: { DATABASE__LOCK_TIMEOUT: '5 seconds', HTTP__RATE_LIMIT_WINDOW: '0ms' },
  });
  t.match(
    error.message,
    'database.lock_timeout = "5 seconds" (from environment DATABASE__LOCK_TIMEOUT): expected a duration (an integer followed by ms, s, m, h or d) from 0ms to 24d',
  );
  t.match(
    error.message,
    'http.rate_limit_window = "0ms" (from environment HTTP__RATE_LIMIT_WINDOW): expected a duration (an integer followed by ms, s, m, h or d) from 1ms to 24d',
  );
  t.end();
});

void t.test('durations beyond their maximum are refused', (t) => {
  const error = loadError({ env: { DATABASE__STATEMENT_TIMEOUT: '25d' } });
  t.match(error.message, 'database.statement_timeout = "25d"');
  t.end();
});

void t.test('the key TTL must be greater than zero', (t) => {
  const error = loadError({ env: { SYNC__IDEMPOTENCY_KEY_TTL: '0h' } });
  t.match(
    error.message,
    'sync.idempotency_key_ttl = "0h" (from environment SYNC__IDEMPOTENCY_KEY_TTL): expected a duration (an integer followed by ms, s, m, h or d) of at least 1ms',
  );
  t.end();
});

void t.test('a bad size is refused', (t) => {
  const error = loadError({ env: { HTTP__BODY_LIMIT: '1 MB' } });
  t.equal(
    error.message,
    'Invalid configuration: http.body_limit = "1 MB" (from environment HTTP__BODY_LIMIT): expected a size (an integer followed by b, kb, mb or gb) of at least 1b',
  );
  const zero = loadError({ env: { HTTP__BODY_LIMIT: '0kb' } });
  t.match(zero.message, 'http.body_limit = "0kb"');
  t.end();
});

void t.test('a bad enum value is refused', (t) => {
  const error = loadError({ env: { LOG__LEVEL: 'verbose' } });
  t.equal(
    error.message,
    'Invalid configuration: log.level = "verbose" (from environment LOG__LEVEL): expected one of fatal, error, warn, info, debug, trace, silent',
  );
  t.end();
});

void t.test('strings with a required shape are checked', (t) => {
  const error = loadError({
    env: {
      APP__NAME: '',
      DATABASE__URL: 'mysql://root:hunter2@db/app',
      DATABASE__EMBEDDED_DATA_DIR: '',
    },
  });
  t.match(error.message, 'app.name = "" (from environment APP__NAME): expected a non-empty string');
  t.match(
    error.message,
    'database.url = "mysql://root:***@db/app" (from environment DATABASE__URL): expected an empty string or a URL starting with postgres:// or postgresql://',
  );
  t.notMatch(error.message, 'hunter2', 'a password never reaches the message');
  t.match(error.message, 'database.embedded_data_dir = ""');
  t.end();
});

void t.test('the cleanup interval must fit a cron step', (t) => {
  const minute = 60_000;
  const hour = 60 * minute;
  for (const [accepted, ms] of [
    ['15m', 15 * minute],
    ['2h', 2 * hour],
    ['1h', hour],
    ['1m', minute],
    ['30m', 30 * minute],
    ['60m', hour],
    ['120m', 2 * hour],
    ['3600s', hour],
    ['24h', 24 * hour],
    ['1d', 24 * hour],
  ] as const) {
    const config = loadConfig({ env: { SYNC__IDEMPOTENCY_CLEANUP_INTERVAL: accepted } });
    t.equal(config.sync.idempotency_cleanup_interval, ms, `${accepted} accepted`);
  }
  for (const refused of ['7m', '5h', '90m', '30s', '0m', '48h', '2d', '61m', '1500ms']) {
    const error = loadError({ env: { SYNC__IDEMPOTENCY_CLEANUP_INTERVAL: refused } });
    t.match(
      error.message,
      `sync.idempotency_cleanup_interval = "${refused}" (from environment SYNC__IDEMPOTENCY_CLEANUP_INTERVAL): expected a duration of whole minutes that divide 60`,
      `${refused} refused`,
    );
  }
  const error = loadError({ env: { SYNC__IDEMPOTENCY_CLEANUP_INTERVAL: '7m' } });
  t.match(error.message, '(1m, 2m, 3m, 4m, 5m, 6m, 10m, 12m, 15m, 20m, 30m)');
  t.match(error.message, '(1h, 2h, 3h, 4h, 6h, 8h, 12h, 24h)');
  t.end();
});

void t.test('unknown keys in the config file are errors naming the key', (t) => {
  const file = configFile(
    t,
    JSON.stringify({
      http: { port: 3000, prot: 1 },
      cache: { size: 1 },
      'http.port': 3000,
    }),
  );
  const error = loadError({ env: {}, file });
  t.match(error.message, `unknown key http.prot (from file ${file})`);
  t.match(error.message, 'known http keys: http.host, http.port, http.body_limit');
  t.match(error.message, `unknown key cache (from file ${file})`);
  t.match(error.message, 'known groups: app, http, database, identity, sync, log');
  t.match(error.message, `unknown key http.port (from file ${file}): nest keys by group`);
  t.same(
    error.problems.map((problem) => problem.key),
    ['http.prot', 'cache', 'http.port'],
  );
  t.end();
});

void t.test('a group that is not an object is refused', (t) => {
  const file = configFile(t, JSON.stringify({ http: 8080, log: ['info'] }));
  const error = loadError({ env: {}, file });
  t.match(error.message, `http = 8080 (from file ${file}): expected an object of http keys`);
  t.match(error.message, `log = ["info"] (from file ${file}): expected an object of log keys`);
  t.end();
});

void t.test('unknown environment variables under a known prefix are errors naming them', (t) => {
  const error = loadError({
    env: { HTTP__PROT: '80', DATABASE__LOCK_TIMEOUT_MS: '5', SYNC__: 'x' },
  });
  t.match(
    error.message,
    'unknown key database.lock_timeout_ms (from environment DATABASE__LOCK_TIMEOUT_MS): known DATABASE__ variables: DATABASE__URL,',
  );
  t.match(
    error.message,
    'unknown key http.prot (from environment HTTP__PROT): known HTTP__ variables: HTTP__HOST, HTTP__PORT,',
  );
  t.match(error.message, 'unknown key sync. (from environment SYNC__)');
  t.same(
    error.problems.map((problem) => problem.source),
    ['environment DATABASE__LOCK_TIMEOUT_MS', 'environment HTTP__PROT', 'environment SYNC__'],
    'reported in a stable order',
  );
  t.end();
});

void t.test('a missing config file is an error naming the path', (t) => {
  const file = join(t.testdir({}), 'absent.json');
  const error = loadError({ env: {}, file });
  t.match(error.message, `Invalid configuration: config file ${file} cannot be read: ENOENT`);
  t.same(error.problems[0]?.key, null);
  t.equal(error.problems[0]?.source, `file ${file}`);
  t.end();
});

void t.test('a directory given as config file is an error naming the path', (t) => {
  const dir = t.testdir({});
  const error = loadError({ env: {}, file: dir });
  t.match(error.message, `config file ${dir} cannot be read: EISDIR`);
  t.end();
});

void t.test('an invalid JSON config file is an error naming the path', (t) => {
  const file = configFile(t, '{ "http": { "port": 3000, } }');
  const error = loadError({ env: {}, file });
  t.match(error.message, `Invalid configuration: config file ${file} is not valid JSON: `);
  t.end();
});

void t.test('a config file that is not a JSON object is refused', (t) => {
  for (const [content, kind] of [
    ['[]', 'an array'],
    ['null', 'null'],
    ['"text"', 'a string'],
    ['3', 'a number'],
  ] as const) {
    const file = configFile(t, content);
    const error = loadError({ env: {}, file });
    t.equal(
      error.message,
      `Invalid configuration: config file ${file} must hold a JSON object, not ${kind}`,
    );
  }
  t.end();
});

void t.test('a config file saved with a byte order mark is read', (t) => {
  const file = configFile(t, '\uFEFF{"http": {"port": 8081}}');
  t.equal(loadConfig({ env: {}, file }).http.port, 8081);
  t.end();
});

void t.test('an empty object config file is valid', (t) => {
  const file = configFile(t, '{}\n');
  t.same(loadConfig({ env: {}, file }), DEFAULTS);
  t.end();
});

void t.test('several problems are reported together, one line each', (t) => {
  const file = configFile(t, JSON.stringify({ http: { port: -1, porty: 1 } }));
  const error = loadError({
    env: {
      HTTP__PORT: 'abc',
      LOG__LEVEL: 'loud',
      DATABASE__POOL_MAX: '1001',
      APP__NAMES: 'x',
    },
    file,
  });
  const lines = error.message.split('\n');
  t.equal(lines.length, 6);
  t.equal(error.problems.length, 6);
  for (const line of lines) t.match(line, /^Invalid configuration: /);
  t.same(
    error.problems.map((problem) => problem.key),
    ['http.porty', 'app.names', 'http.port', 'http.port', 'database.pool_max', 'log.level'],
    'file structure, then unknown variables, then keys in schema order',
  );
  t.match(lines[2], `http.port = -1 (from file ${file})`);
  t.match(lines[3], 'http.port = "abc" (from environment HTTP__PORT)');
  t.end();
});

void t.test('a bad file value is reported even when the environment overrides it', (t) => {
  const file = configFile(t, JSON.stringify({ http: { port: 'eighty' } }));
  const error = loadError({ env: { HTTP__PORT: '80' }, file });
  t.equal(error.problems.length, 1);
  t.match(error.message, `http.port = "eighty" (from file ${file})`);
  t.end();
});

void t.test('loadConfigFromProcess reads process.env and the given file', (t) => {
  const saved = { port: process.env.HTTP__PORT, level: process.env.LOG__LEVEL };
  t.teardown(() => {
    for (const [name, value] of [
      ['HTTP__PORT', saved.port],
      ['LOG__LEVEL', saved.level],
    ] as const) {
      if (value === undefined) Reflect.deleteProperty(process.env, name);
      else process.env[name] = value;
    }
  });
  process.env.HTTP__PORT = '4321';
  Reflect.deleteProperty(process.env, 'LOG__LEVEL');
  t.equal(loadConfigFromProcess().http.port, 4321);
  const file = configFile(t, JSON.stringify({ log: { level: 'warn' } }));
  const config = loadConfigFromProcess(file);
  t.equal(config.log.level, 'warn');
  t.equal(config.http.port, 4321);
  process.env.HTTP__PORT = 'x';
  t.throws(() => loadConfigFromProcess(), ConfigError);
  t.end();
});

void t.test('describeSource labels every kind of source', (t) => {
  t.equal(describeSource({ kind: 'default' }), 'default');
  t.equal(describeSource({ kind: 'file', path: 'conf/app.json' }), 'file conf/app.json');
  t.equal(describeSource({ kind: 'env', name: 'HTTP__PORT' }), 'environment HTTP__PORT');
  t.end();
});

void t.test('renderValue shows JSON, hides passwords and shortens long values', (t) => {
  t.equal(renderValue('abc'), '"abc"');
  t.equal(renderValue(12), '12');
  t.equal(renderValue({ a: [1] }), '{"a":[1]}');
  t.equal(renderValue('postgres://user:pw@host/db'), '"postgres://user:***@host/db"');
  t.equal(renderValue('postgres://user@host/db'), '"postgres://user@host/db"');
  const long = renderValue('x'.repeat(500));
  t.ok(long.length <= 124, 'long values are cut');
  t.match(long, /\.\.\.$/);
  t.end();
});

void t.test('ConfigError keeps the problems it was given', (t) => {
  const error = new ConfigError([
    { key: 'http.port', source: 'default', message: 'first' },
    { key: null, source: 'file x', message: 'second' },
  ]);
  t.equal(error.message, 'Invalid configuration: first\nInvalid configuration: second');
  t.ok(error instanceof Error);
  t.equal(error.problems.length, 2);
  t.ok(Object.isFrozen(error.problems));
  t.end();
});

void t.test('booleans are true or false, from a file or the environment', (t) => {
  const off = loadConfig({ env: { METRICS__ENABLED: 'false', METRICS__PROCESS_METRICS: 'false' } });
  t.equal(off.metrics.enabled, false);
  t.equal(off.metrics.process_metrics, false);
  t.equal(loadConfig({ env: { METRICS__ENABLED: 'true' } }).metrics.enabled, true);
  const file = configFile(t, '{"metrics": {"enabled": false}}');
  t.equal(loadConfig({ env: {}, file }).metrics.enabled, false, 'a JSON boolean in a file');
  for (const bad of ['yes', '1', 'TRUE', '']) {
    const error = loadError({ env: { METRICS__ENABLED: bad } });
    t.equal(
      error.message,
      `Invalid configuration: metrics.enabled = ${JSON.stringify(bad)} (from environment METRICS__ENABLED): expected true or false`,
      `refuses ${JSON.stringify(bad)}`,
    );
  }
  const quoted = loadError({ env: {}, file: configFile(t, '{"metrics": {"enabled": "false"}}') });
  t.match(quoted.message, 'metrics.enabled = "false"', 'a file must hold a JSON boolean');
  t.end();
});

void t.test('the metrics path must be an absolute path of plain segments', (t) => {
  t.equal(loadConfig({ env: { METRICS__PATH: '/ops/metrics' } }).metrics.path, '/ops/metrics');
  for (const bad of ['metrics', '/', '/metrics/', '//metrics', '/a b', '/:name', '/m?x=1', '/m*']) {
    const error = loadError({ env: { METRICS__PATH: bad } });
    t.match(
      error.message,
      `metrics.path = ${JSON.stringify(bad)} (from environment METRICS__PATH): expected a path starting with /`,
      `refuses ${JSON.stringify(bad)}`,
    );
  }
  t.end();
});

void t.test('the worker metrics port is a TCP port', (t) => {
  t.equal(loadConfig({ env: { METRICS__PORT: '0' } }).metrics.port, 0);
  t.match(
    loadError({ env: { METRICS__PORT: '65536' } }).message,
    'metrics.port = "65536" (from environment METRICS__PORT): expected an integer from 0 to 65535',
  );
  t.end();
});

void t.test('the sampling ratio is a number from 0 to 1, from a file or the environment', (t) => {
  t.equal(loadConfig({ env: { TRACING__SAMPLING_RATIO: '0.25' } }).tracing.sampling_ratio, 0.25);
  t.equal(loadConfig({ env: { TRACING__SAMPLING_RATIO: '0' } }).tracing.sampling_ratio, 0);
  t.equal(loadConfig({ env: { TRACING__SAMPLING_RATIO: '1' } }).tracing.sampling_ratio, 1);
  for (const value of ['', '1.5', '-0.1', '.5', '1e-1', ' 0.5', 'half', 'NaN', '0x1']) {
    const error = loadError({ env: { TRACING__SAMPLING_RATIO: value } });
    t.match(
      error.message,
      `tracing.sampling_ratio = ${JSON.stringify(value)} (from environment TRACING__SAMPLING_RATIO): expected a number from 0 to 1 (for example 0.25)`,
      JSON.stringify(value),
    );
  }
  const file = configFile(t, '{"tracing": {"sampling_ratio": 2}}');
  t.match(
    loadError({ env: {}, file }).message,
    `tracing.sampling_ratio = 2 (from file ${file}): expected a number from 0 to 1`,
  );
  const text = configFile(t, '{"tracing": {"sampling_ratio": "0.5"}}');
  t.match(
    loadError({ env: {}, file: text }).message,
    `tracing.sampling_ratio = "0.5" (from file ${text}): expected a number from 0 to 1`,
  );
  t.end();
});

void t.test('the tracing endpoint is an http or https URL', (t) => {
  t.equal(
    loadConfig({ env: { TRACING__ENDPOINT: 'https://collector.internal:4318/v1/traces' } }).tracing
      .endpoint,
    'https://collector.internal:4318/v1/traces',
  );
  t.equal(
    loadConfig({ env: { TRACING__ENDPOINT: 'http://[::1]:4318/v1/traces' } }).tracing.endpoint,
    'http://[::1]:4318/v1/traces',
  );
  for (const bad of [
    '',
    'collector:4318',
    'ftp://collector/v1/traces',
    'http://',
    'http://a b',
    'http://[',
    'http://::1:4318',
    'http://%zz',
    'http://collector:4318/v1/%zz',
  ]) {
    t.match(
      loadError({ env: { TRACING__ENDPOINT: bad } }).message,
      `tracing.endpoint = ${JSON.stringify(bad)} (from environment TRACING__ENDPOINT): expected an http:// or https:// URL of a host, an optional port and a path`,
      JSON.stringify(bad),
    );
  }
  // Every value the pattern takes, the exporter's parser takes too.
  for (const good of ['http://127.0.0.1:4318/v1/traces', 'https://otel.internal/v1/traces']) {
    t.doesNotThrow(() => new URL(good), good);
  }
  t.end();
});
