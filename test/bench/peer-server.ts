/**
 * The benchmark's peer server: the same application as `serve --role api`
 * (same configuration, modules, stages and transaction per request), with
 * the peer library installed in front of the transfer route (see peer.ts).
 * Configuration comes from the environment as for the real server;
 * `database.url` must be set. Stops on SIGTERM or SIGINT.
 */
import { buildApp } from '../../apps/server/app.js';
import { loadConfigFromProcess } from '../../platform/config/index.js';
import { createLogger } from '../../platform/log/index.js';
import { peerModule } from './peer.js';

const config = loadConfigFromProcess(undefined);
if (config.database.url === '') {
  process.stderr.write('peer-server: set DATABASE__URL\n');
  process.exit(2);
}
const logger = createLogger({ appName: config.app.name, level: config.log.level });
const app = await buildApp({
  config,
  appUrl: config.database.url,
  logger,
  extraModules: () => [peerModule()],
});
const address = await app.http.listen({ host: config.http.host, port: config.http.port });
logger.info({ address, role: 'api', peer: true }, 'listening');
const stop = (): void => {
  void app.close().then(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
