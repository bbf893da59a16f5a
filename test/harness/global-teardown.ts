/**
 * tap `after` script: removes what global-setup made. An embedded cluster is
 * stopped and its folder deleted; on a shared server the template database is
 * dropped (roles stay: other runs may use them).
 */
import fs from 'node:fs/promises';
import { createSql } from '../../platform/pg/client.js';
import { EmbeddedPostgres } from '../../platform/pg/embedded.js';
import { dropDatabase } from '../../platform/pg/roles.js';
import { stateFile, type HarnessState } from './cluster.js';

let state: HarnessState | undefined;
try {
  state = JSON.parse(await fs.readFile(stateFile(), 'utf8')) as HarnessState;
} catch {
  state = undefined;
}
if (state) {
  if (state.provider === 'embedded' && state.embeddedRoot !== undefined) {
    await EmbeddedPostgres.stopAt(state.embeddedRoot, 'immediate');
    await fs.rm(state.embeddedRoot, { recursive: true, force: true });
  } else {
    const admin = createSql(state.adminUrl, { max: 1, applicationName: 'test-harness' });
    try {
      const leftovers = await admin<{ datname: string }[]>`
        select datname from pg_database where datname like ${state.templateDatabase.replace('template', 'file') + '%'}`;
      for (const { datname } of leftovers) await dropDatabase(admin, datname);
      await dropDatabase(admin, state.templateDatabase);
    } finally {
      await admin.end();
    }
    if (state.provider === 'container' && state.containerId !== undefined) {
      const { execFile } = await import('node:child_process');
      execFile('docker', ['rm', '-f', state.containerId], () => undefined);
    }
  }
  await fs.rm(stateFile(), { force: true });
}
