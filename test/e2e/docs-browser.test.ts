/**
 * The API document's UI at /docs, in headless Chromium (Debian's package,
 * installed by `make browser-deps`, which `make test` and `make check` run
 * first): keyed operations show the Idempotency-Key header parameter, and
 * required-key operations mark it required; unkeyed ones do not show it.
 */
import { existsSync } from 'node:fs';
import t from 'tap';
import { chromium } from 'playwright-core';
import { startTestApp } from '../harness/app.js';

const CHROMIUM = '/usr/bin/chromium';
/** What Chromium needs as root on a closed network (see the machine notes). */
const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

void t.test('the /docs UI shows the Idempotency-Key header on keyed operations', async (t) => {
  t.ok(
    existsSync(CHROMIUM),
    `${CHROMIUM} exists (run \`make browser-deps\` to install Debian's chromium)`,
  );
  const k = await startTestApp(t);
  const base = await k.app.http.listen({ host: '127.0.0.1', port: 0 });
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
  t.teardown(() => browser.close());
  const page = await browser.newPage();
  await page.goto(`${base}/docs/`);
  const operation = async (tag: string, operationId: string): Promise<string> => {
    const block = page.locator(`#operations-${tag}-${operationId}`);
    await block.locator('.opblock-summary').first().click();
    await block.locator('.parameters-container').first().waitFor();
    return block.innerText();
  };
  const transfer = await operation('ledger', 'createTransfer');
  t.match(transfer, /Idempotency-Key/, 'a keyed operation shows the header');
  t.match(transfer, /UUIDv7/, 'with its description');
  await operation('identity', 'getMe');
  // Its parameters, not its answers: GET /me documents the
  // Idempotency-Key-Lifetime answer header, whose text names the key.
  const meParameters = await page
    .locator('#operations-identity-getMe .parameters-container')
    .first()
    .innerText();
  t.notMatch(meParameters, /Idempotency-Key/, 'an unkeyed operation does not');
});
