/**
 * The outbox's files on a real file system: who may read them. An outbox
 * holds request bodies, answers and the principal's id, so it and the
 * files SQLite keeps beside it are the owner's alone, whatever the umask.
 */
import { existsSync, statSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { Outbox } from './outbox.js';

async function tempDir(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-files-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

const mode = (file: string): string => (statSync(file).mode & 0o777).toString(8).padStart(4, '0');

void t.test('a new outbox and its -wal and -shm files are 0600 under umask 022', async (t) => {
  const dir = await tempDir(t);
  const file = path.join(dir, 'outbox.sqlite');
  const before = process.umask(0o022);
  t.teardown(() => process.umask(before));
  const outbox = Outbox.open(file);
  t.teardown(() => {
    outbox.close();
  });
  outbox.enqueue({ operation: 'op', method: 'POST', path: '/x', body: { secret: 'body' } });
  t.equal(mode(file), '0600', 'the outbox');
  t.ok(existsSync(`${file}-wal`), 'the write-ahead log exists while the outbox is open');
  for (const side of ['-wal', '-shm', '-journal']) {
    if (existsSync(`${file}${side}`)) t.equal(mode(`${file}${side}`), '0600', side);
  }
  t.same(
    (await fs.readdir(dir)).filter((f) => !f.startsWith('outbox.sqlite')),
    [],
    'no other file is left in the folder',
  );
});
