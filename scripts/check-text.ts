/**
 * Text rules of `make check`: no en dash (U+2013) or em dash (U+2014) in any
 * tracked text file, and the service name hard-coded nowhere: the default of
 * `app.name` may appear only in the configuration schema and the documents
 * generated from it, since the name shown to users is configuration.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { loadConfig } from '../platform/config/index.js';
import { projectRoot } from '../platform/migrate/index.js';

const root = projectRoot();
const files = execFileSync(
  'git',
  ['ls-files', '--cached', '--others', '--exclude-standard', '-z'],
  {
    cwd: root,
    encoding: 'utf8',
  },
)
  .split('\0')
  .filter((f) => f !== '');
const serviceName = loadConfig({ env: {} }).app.name;
const nameAllowed = new Set([
  'platform/config/schema.ts',
  'docs/operations/configuration.md',
  'docs/api/openapi.json',
  'package.json',
  'package-lock.json',
]);
const dashes = /[\u2013\u2014]/;
const problems: string[] = [];
for (const file of files) {
  const buf = await fs.readFile(path.join(root, file)).catch(() => undefined);
  if (!buf || buf.includes(0)) continue;
  const text = buf.toString('utf8');
  text.split('\n').forEach((line, i) => {
    if (dashes.test(line))
      problems.push(`${file}:${String(i + 1)}: en or em dash; use a colon, comma or parentheses`);
    if (!nameAllowed.has(file) && !file.endsWith('.test.ts') && line.includes(serviceName)) {
      problems.push(
        `${file}:${String(i + 1)}: hard-coded service name "${serviceName}"; read app.name from configuration`,
      );
    }
  });
}
if (problems.length > 0) {
  console.error(`Text rules failed:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  process.exit(1);
}
console.log(`text rules: ${String(files.length)} files clean`);
