/**
 * The benchmark's trace collector as a process: it counts the spans and
 * the `request` spans of OTLP/HTTP JSON posts, and a post that is not JSON
 * is refused with 400 and counted, the collector still answering after it
 * (a collector that died on one bad post would leave the bench waiting
 * for counts it can no longer read).
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';

const here = path.dirname(fileURLToPath(import.meta.url));

async function freePort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as net.AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

void t.test('the collector counts spans, refuses what is not JSON, and lives on', async (t) => {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(here, 'otlp-sink.ts')], {
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HTTP__PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  const base = `http://127.0.0.1:${String(port)}`;
  for (let i = 0; ; i++) {
    const ok = await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (i > 200) throw new Error('the collector did not start');
    await new Promise((r) => setTimeout(r, 50));
  }
  const post = (body: string): Promise<Response> =>
    fetch(`${base}/v1/traces`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
  const spans = {
    resourceSpans: [{ scopeSpans: [{ spans: [{ name: 'request' }, { name: 'SELECT' }] }] }],
  };
  t.equal((await post(JSON.stringify(spans))).status, 200);
  t.equal((await post('\n\u0000not json')).status, 400, 'not JSON: refused');
  t.equal((await post(JSON.stringify(spans))).status, 200, 'and the next post is taken');
  t.same(await (await fetch(`${base}/count`)).json(), {
    posts: 2,
    spans: 4,
    requestSpans: 2,
    refused: 1,
  });
  child.kill('SIGTERM');
  t.equal(await exited, 0, 'stops on SIGTERM');
});
