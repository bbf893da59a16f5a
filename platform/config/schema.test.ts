import t from 'tap';
import { Value } from 'typebox/value';
import { Type } from 'typebox';
import { CONFIG_KEYS, ConfigSchema, envVarName } from './index.js';
import { leafAnnotations } from './schema.js';

const EXPECTED_KEYS = [
  'app.name',
  'http.host',
  'http.port',
  'http.body_limit',
  'http.rate_limit_max',
  'http.rate_limit_window',
  'http.request_timeout',
  'http.headers_timeout',
  'http.keep_alive_timeout',
  'http.socket_timeout',
  'http.max_connections',
  'http.max_pipelined_requests',
  'database.url',
  'database.owner_url',
  'database.pool_max',
  'database.lock_timeout',
  'database.statement_timeout',
  'database.transaction_timeout',
  'database.connect_timeout',
  'database.tx_retry_max',
  'database.embedded_data_dir',
  'database.embedded_port',
  'identity.token_cache_ttl',
  'identity.token_cache_size',
  'sync.idempotency_key_ttl',
  'sync.idempotency_cleanup_interval',
  'sync.idempotency_cleanup_batch_size',
  'sync.idempotency_cleanup_pacing',
  'sync.idempotency_replay_cache_ttl',
  'sync.idempotency_replay_cache_size',
  'log.level',
  'metrics.enabled',
  'metrics.listener',
  'metrics.path',
  'metrics.port',
  'metrics.key_stats_min_interval',
  'metrics.process_metrics',
  'tracing.enabled',
  'tracing.endpoint',
  'tracing.sampling_ratio',
];

void t.test('the schema holds exactly the documented keys, in order', (t) => {
  t.same(
    CONFIG_KEYS.map((info) => info.key),
    EXPECTED_KEYS,
  );
  t.same(Object.keys(ConfigSchema.properties), [
    'app',
    'http',
    'database',
    'identity',
    'sync',
    'log',
    'metrics',
    'tracing',
  ]);
  t.end();
});

void t.test('every key is dotted snake case split into group and name', (t) => {
  for (const info of CONFIG_KEYS) {
    t.match(info.key, /^[a-z][a-z0-9]*\.[a-z][a-z0-9_]*$/, info.key);
    t.equal(`${info.group}.${info.name}`, info.key);
  }
  t.end();
});

void t.test('environment names upper-case the key and turn dots into double underscores', (t) => {
  t.equal(envVarName('database.lock_timeout'), 'DATABASE__LOCK_TIMEOUT');
  t.equal(envVarName('http.port'), 'HTTP__PORT');
  t.equal(envVarName('sync.idempotency_key_ttl'), 'SYNC__IDEMPOTENCY_KEY_TTL');
  for (const info of CONFIG_KEYS) t.equal(info.env, envVarName(info.key));
  t.end();
});

void t.test(
  'every key has a description, a type label and a default that its own schema accepts',
  (t) => {
    for (const info of CONFIG_KEYS) {
      t.ok(info.description.length > 20, `${info.key} is described`);
      t.match(info.description, /\.$/, `${info.key} description is a sentence`);
      t.ok(info.type.length > 0, `${info.key} has a type label`);
      t.ok(info.expected.length > 0, `${info.key} says what it expects`);
      t.ok(Value.Check(info.schema, info.default), `${info.key} default is valid`);
    }
    t.end();
  },
);

void t.test('the whole schema accepts the defaults and refuses unknown keys', (t) => {
  const defaults = Object.fromEntries(
    Object.keys(ConfigSchema.properties).map((group) => [
      group,
      Object.fromEntries(
        CONFIG_KEYS.filter((info) => info.group === group).map((info) => [info.name, info.default]),
      ),
    ]),
  );
  t.ok(Value.Check(ConfigSchema, defaults));
  t.notOk(Value.Check(ConfigSchema, { ...defaults, extra: {} }));
  t.notOk(Value.Check(ConfigSchema, { ...defaults, http: { ...defaults.http, extra: 1 } }));
  t.end();
});

void t.test('the documented defaults', (t) => {
  const defaults = Object.fromEntries(CONFIG_KEYS.map((info) => [info.key, info.default]));
  t.same(defaults, {
    'app.name': 'idempotent-api',
    'http.host': '127.0.0.1',
    'http.port': 3000,
    'http.body_limit': '1mb',
    'http.rate_limit_max': 100,
    'http.rate_limit_window': '1m',
    'http.request_timeout': '30s',
    'http.headers_timeout': '10s',
    'http.keep_alive_timeout': '5s',
    'http.socket_timeout': '90s',
    'http.max_connections': 1024,
    'http.max_pipelined_requests': 16,
    'database.url': '',
    'database.owner_url': '',
    'database.pool_max': 10,
    'database.lock_timeout': '5s',
    'database.statement_timeout': '30s',
    'database.transaction_timeout': '60s',
    'database.connect_timeout': '5s',
    'database.tx_retry_max': 3,
    'database.embedded_data_dir': '.data/pg',
    'database.embedded_port': 0,
    'identity.token_cache_ttl': '5s',
    'identity.token_cache_size': 10000,
    'sync.idempotency_key_ttl': '24h',
    'sync.idempotency_cleanup_interval': '1h',
    'sync.idempotency_cleanup_batch_size': 5000,
    'sync.idempotency_cleanup_pacing': 2,
    'sync.idempotency_replay_cache_ttl': '60s',
    'sync.idempotency_replay_cache_size': 10_000,
    'log.level': 'info',
    'metrics.enabled': true,
    'metrics.path': '/metrics',
    'metrics.listener': 'api',
    'metrics.port': 9464,
    'metrics.key_stats_min_interval': '10s',
    'metrics.process_metrics': true,
    'tracing.enabled': false,
    'tracing.endpoint': 'http://127.0.0.1:4318/v1/traces',
    'tracing.sampling_ratio': 1,
  });
  t.end();
});

void t.test('only connection URLs are marked secret', (t) => {
  t.same(
    CONFIG_KEYS.filter((info) => info.secret).map((info) => info.key),
    ['database.url', 'database.owner_url'],
  );
  t.end();
});

void t.test('descriptors are frozen so callers cannot change the schema by accident', (t) => {
  t.ok(Object.isFrozen(CONFIG_KEYS));
  t.ok(CONFIG_KEYS.every((info) => Object.isFrozen(info)));
  t.end();
});

void t.test('leafAnnotations refuses a schema not built by the schema helpers', (t) => {
  t.throws(() => leafAnnotations(Type.String()), {
    message: 'configuration leaf lacks its default, description or metadata',
  });
  const leaf = CONFIG_KEYS[0]!;
  t.equal(leafAnnotations(leaf.schema).description, leaf.description);
  t.end();
});
