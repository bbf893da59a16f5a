import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createSql } from './client.js';
import { EmbeddedInUseError, EmbeddedPostgres, EmbeddedStartError } from './embedded.js';

void t.test(
  'a second process cannot take over a data folder in use; a stale lock is reclaimed',
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

void t.test(
  'a running server is found through its lock, which records where it listens',
  async (t) => {
    const root = await fs.mkdtemp(path.join(os.tmpdir(), 'embedded-running-'));
    t.teardown(() => fs.rm(root, { recursive: true, force: true }));
    t.equal(await EmbeddedPostgres.running(root), undefined, 'nothing runs in an empty folder');
    const first = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true });
    t.teardown(() => first.stop('immediate'));
    const lockFile = path.join(root, 'server.lock');
    const taken = JSON.parse(await fs.readFile(lockFile, 'utf8')) as Record<string, unknown>;
    t.equal(taken['pid'], process.pid);
    t.match(
      taken['started'],
      /^[0-9a-f-]+:\d+$/,
      'when the holder started, so a reused pid is not it',
    );
    t.equal(taken['port'], undefined, 'not shared until the holder says so');
    t.equal(await EmbeddedPostgres.running(root), undefined, 'a server not shared is not found');

    await first.share();
    t.same(JSON.parse(await fs.readFile(lockFile, 'utf8')), { ...taken, port: first.port });
    const found = await EmbeddedPostgres.running(root);
    t.equal(found?.port, first.port, 'the recorded port');
    const sql = createSql(found?.adminUrl() ?? '', { max: 1, applicationName: 'running-test' });
    const [row] = await sql<{ one: number }[]>`select 1 as one`;
    t.equal(row?.one, 1, 'reachable with the credentials kept beside the data');
    await sql.end();

    // A holder that has not recorded its port yet is still starting.
    await fs.writeFile(lockFile, JSON.stringify({ pid: process.pid }));
    t.equal(await EmbeddedPostgres.running(root), undefined, 'no port yet: not usable');
    const refusal = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true }).then(
      () => undefined,
      (err: unknown) => err,
    );
    t.ok(refusal instanceof EmbeddedInUseError);
    t.match(
      (refusal as Error).message,
      /in use by process \d+ \(a server still starting, or another admin command\): try again in a moment$/,
    );
    t.notMatch((refusal as Error).message, /\n/, 'one line');

    // A holder that is gone is no server to use, nor is a pid that now
    // belongs to another process (a restart reused it).
    await fs.writeFile(lockFile, JSON.stringify({ pid: 2147483646, port: first.port }));
    t.equal(await EmbeddedPostgres.running(root), undefined, 'a dead holder');
    await fs.writeFile(
      lockFile,
      JSON.stringify({ pid: process.pid, started: 'another-boot:1', port: first.port }),
    );
    t.equal(await EmbeddedPostgres.running(root), undefined, 'a reused pid');
    await fs.writeFile(lockFile, JSON.stringify({ ...taken, port: first.port + 1 }));
    t.equal(
      await EmbeddedPostgres.running(root),
      undefined,
      'a port the server does not listen on',
    );
    await fs.writeFile(lockFile, 'not a lock');
    t.equal(await EmbeddedPostgres.running(root), undefined, 'an unreadable lock');
    await fs.writeFile(lockFile, JSON.stringify({ ...taken, port: first.port }));
  },
);

void t.test(
  'a data folder below one the postgres OS user cannot enter is named in one line (root) or used (not root)',
  async (t) => {
    const parent = await fs.mkdtemp(path.join(os.tmpdir(), 'embedded-private-'));
    t.teardown(() => fs.rm(parent, { recursive: true, force: true }));
    await fs.chmod(parent, 0o700);
    const root = path.join(parent, 'pg');
    if (process.getuid?.() === 0) {
      // PostgreSQL runs as the postgres user, who cannot pass through a
      // private folder of root's.
      const err = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true }).then(
        () => undefined,
        (e: unknown) => e,
      );
      t.ok(err instanceof EmbeddedStartError, 'refused before initdb');
      t.equal(
        (err as Error).message,
        `the embedded PostgreSQL cannot use ${root}: the postgres OS user cannot enter ${parent} ` +
          `(mode 0700); set database.embedded_data_dir to a folder it can reach, or allow it in (chmod o+x ${parent})`,
      );
      await t.rejects(fs.access(root), 'nothing was created');
    } else {
      // Running as its owner, PostgreSQL can enter the folder: it starts.
      const pg = await EmbeddedPostgres.start({ rootDir: root, port: 0, ephemeral: true });
      t.teardown(() => pg.stop('immediate'));
      t.ok(pg.port > 0);
    }
  },
);
