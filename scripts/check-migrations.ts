/**
 * Migration gate of `make check`: every committed graphile-migrate file has a
 * `Previous` header naming its predecessor's hash and a `Hash` header that
 * matches its body (graphile-migrate's own formula), numbers run without
 * gaps, and migrations/current.sql holds nothing but comments on main.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { migrationsFolder } from '../platform/migrate/index.js';

const problems: string[] = [];
const folder = migrationsFolder();
const committed = path.join(folder, 'committed');
const files = (await fs.readdir(committed)).filter((f) => f.endsWith('.sql')).sort();
let previous: string | null = null;
files.forEach((file, index) => {
  const expectedNumber = String(index + 1).padStart(6, '0');
  if (!file.startsWith(expectedNumber)) problems.push(`${file}: expected number ${expectedNumber}`);
});
for (const file of files) {
  const text = await fs.readFile(path.join(committed, file), 'utf8');
  const headers = new Map<string, string>();
  const lines = text.split('\n');
  let i = 0;
  for (; i < lines.length; i++) {
    const m = /^--! (\w+)(?::\s?(.*))?$/.exec(lines[i] ?? '');
    if (!m) break;
    headers.set(m[1] ?? '', m[2] ?? '');
  }
  const body = lines.slice(i).join('\n');
  const prev = headers.get('Previous');
  const hash = headers.get('Hash');
  if (prev === undefined || hash === undefined) {
    problems.push(`${file}: missing Previous or Hash header`);
    continue;
  }
  if ((prev === '-' ? null : prev) !== previous) {
    problems.push(`${file}: Previous is ${prev}, expected ${previous ?? '-'}`);
  }
  const computed: string =
    'sha1:' +
    createHash('sha1')
      .update(`${((previous ?? '') + '\n' + body.trim()).trim()}\n`)
      .digest('hex');
  if (computed !== hash)
    problems.push(
      `${file}: Hash ${hash} does not match its body (${computed}); never edit a committed migration`,
    );
  previous = hash;
}
const current = await fs.readFile(path.join(folder, 'current.sql'), 'utf8');
const meaningful = current
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l !== '' && !l.startsWith('--'));
if (meaningful.length > 0)
  problems.push(
    'migrations/current.sql is not empty: commit it (make migration-commit) before merging',
  );
if (problems.length > 0) {
  console.error(`Migration check failed:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  process.exit(1);
}
console.log(`migrations: ${String(files.length)} committed, chain intact, current.sql empty`);
