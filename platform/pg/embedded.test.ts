import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createSql } from './client.js';
import { EmbeddedPostgres } from './embedded.js';

void t.test(
  'a second process cannot take over a data folder in use; a stale lock is reclaimed (found by review)',
  async (t) => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'embedded-lock-'));
    t.teardown(() => fs.rm(root, { recursive: true, force: true }));
    const first = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true });
    t.teardown(() => first.stop('immediate'));
    // The lock names this process, which is alive: a twin start must refuse.
    await t.rejects(
      EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true }),
      new RegExp(`in use by process ${String(process.pid)}`),
    );
    const sql = createSql(first.adminUrl(), { max: 1, applicationName: 'lock-test' });
    const [row] = await sql<{ one: number }[]>`select 1 as one`;
    t.equal(row?.one, 1, 'the first server still answers');
    await sql.end();
    await first.stop('immediate');
    // A lock left by a process that no longer exists is stale.
    await fs.writeFile(path.join(root, 'server.lock'), '2147483646');
    const second = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true });
    t.teardown(() => second.stop('immediate'));
    t.ok(second.port > 0, 'started over a stale lock');
  },
);
