// Public API of the configuration module: the schema of every key, the loader
// and the reference document renderer. Nothing outside this module reads
// process.env; the server's entry point calls loadConfigFromProcess.
export { CONFIG_GROUPS, CONFIG_KEYS, ConfigSchema, envVarName } from './schema.js';
export type {
  Config,
  ConfigDefault,
  ConfigKeyInfo,
  ConfigLeafMeta,
  ConfigSchemaType,
  ConfigValueKind,
  RawConfig,
} from './schema.js';
export { ConfigError, loadConfig, loadConfigFromProcess } from './load.js';
export type { ConfigProblem, ConfigSource, LoadConfigInput } from './load.js';
export { renderConfigurationMarkdown } from './markdown.js';
export { formatDuration, formatSize, parseDuration, parseSize } from './units.js';
