/**
 * Writes the generated documents (`make docs`), or with `--check` fails when
 * a committed one differs from what the code generates (`make check`).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { buildApp } from '../apps/server/app.js';
import { loadConfig, renderConfigurationMarkdown } from '../platform/config/index.js';
import { createLogger } from '../platform/log/index.js';
import { projectRoot } from '../platform/migrate/index.js';

/**
 * The API document of the real application with default configuration. The
 * pool never connects (postgres.js connects on first query), so no database
 * is needed.
 */
async function renderOpenApi(): Promise<string> {
  const appUrl = 'postgres://docs@127.0.0.1:1/docs';
  const app = await buildApp({
    config: loadConfig({ env: { DATABASE__URL: appUrl } }),
    appUrl,
    logger: createLogger({ appName: 'docs', level: 'silent' }),
  });
  try {
    return `${JSON.stringify(app.http.swagger(), null, 2)}\n`;
  } finally {
    await app.close();
  }
}

const check = process.argv.includes('--check');
const root = projectRoot();
const documents: { file: string; render: () => Promise<string> }[] = [
  {
    file: 'docs/operations/configuration.md',
    render: () => Promise.resolve(renderConfigurationMarkdown()),
  },
  { file: 'docs/api/openapi.json', render: renderOpenApi },
];
const stale: string[] = [];
for (const doc of documents) {
  const target = path.join(root, doc.file);
  const text = await doc.render();
  const current = await fs.readFile(target, 'utf8').catch(() => undefined);
  if (current === text) continue;
  if (check) {
    stale.push(doc.file);
  } else {
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.writeFile(target, text);
    console.log(`wrote ${doc.file}`);
  }
}
if (stale.length > 0) {
  console.error(
    `Generated documents are stale: ${stale.join(', ')}. Run \`make docs\` and commit the result.`,
  );
  process.exit(1);
}
if (check) console.log('generated documents are current');
