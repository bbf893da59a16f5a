/**
 * Range requests on the static files under /docs/static/ follow RFC 9110
 * section 14: a Range this server cannot parse is ignored (200, the whole
 * file), a suffix longer than the file selects all of it (206), and a
 * valid range that starts past the end is 416 with a Content-Range that
 * names the size.
 * Through the real server (createHttpServer) over real sockets.
 */
import { readdirSync, readlinkSync } from 'node:fs';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { testServerOptions } from '../../test/harness/http-server.js';
import { createHttpServer } from './server.js';

interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

function get(
  port: number,
  headers: Record<string, string>,
  method = 'GET',
  path = '/docs/static/swagger-ui.css',
): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

void t.test('Range on a static file, by RFC 9110 section 14', async (t) => {
  const app = await createHttpServer(testServerOptions());
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const port = (app.server.address() as AddressInfo).port;
  const whole = await get(port, {});
  t.equal(whole.status, 200);
  const file = whole.body;
  const size = file.length;
  t.ok(size > 1000, 'the file is long enough for the cases');
  t.equal(whole.headers['accept-ranges'], 'bytes');

  const partial = (range: string, first: number, last: number) =>
    t.test(`${range}: 206 bytes ${String(first)}-${String(last)}`, async (t) => {
      const res = await get(port, { range });
      t.equal(res.status, 206);
      t.equal(
        res.headers['content-range'],
        `bytes ${String(first)}-${String(last)}/${String(size)}`,
      );
      t.equal(res.headers['content-length'], String(last - first + 1));
      t.ok(res.body.equals(file.subarray(first, last + 1)), 'the bytes asked for');
    });
  const ignored = (range: string, extra: Record<string, string> = {}) =>
    t.test(`${range}: ignored, 200 with the whole file`, async (t) => {
      const res = await get(port, { range, ...extra });
      t.equal(res.status, 200);
      t.equal(res.headers['content-range'], undefined);
      t.ok(res.body.equals(file), 'the whole file');
    });
  const unsatisfiable = (range: string) =>
    t.test(`${range}: 416`, async (t) => {
      const res = await get(port, { range });
      t.equal(res.status, 416);
      t.equal(res.headers['content-range'], `bytes */${String(size)}`);
      t.match(JSON.parse(res.body.toString()), { code: 'range_not_satisfiable', status: 416 });
      t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
      t.equal(res.headers['content-length'], String(res.body.length));
      t.equal(res.headers.etag, undefined, "the file's validators are not the problem's");
      t.equal(res.headers['last-modified'], undefined);
    });

  // The ordinary ones.
  await partial('bytes=0-1', 0, 1);
  await partial('bytes=10-', 10, size - 1);
  await partial('bytes=-10', size - 10, size - 1);
  await partial(`bytes=5-${String(size * 2)}`, 5, size - 1);
  await partial('Bytes=0-1', 0, 1);
  await partial('bytes=0-1 , ,2-3', 0, 3);
  // A suffix longer than the file selects all of it (section 14.1.3).
  await partial('bytes=-999999', 0, size - 1);
  await partial(`bytes=-${String(size)}`, 0, size - 1);
  await partial('bytes=-99999999999999999999', 0, size - 1);
  // Digits only: anything else is a syntax this server ignores (section 14.2).
  await ignored('bytes=1e3-2e3');
  await ignored('bytes=0x10-0x20');
  await ignored('bytes=+1-2');
  await ignored('bytes=1.5-2');
  await ignored('bytes=x');
  await ignored('bytes=');
  await ignored('bytes=-');
  await ignored('bytes=0-1,x');
  await ignored('bytes=5-1');
  await ignored('bytes=9007199254740993-9007199254740992');
  await ignored('items=0-1');
  await ignored('bytes 0-1');
  // Several ranges that do not merge into one: the whole file, as before.
  await ignored('bytes=0-1,5-6');
  // If-Range: a weak validator never matches (section 13.1.5), so the
  // Range is ignored; the Last-Modified date does.
  await ignored('bytes=0-1', { 'if-range': String(whole.headers.etag) });
  await ignored('bytes=0-1', { 'if-range': 'Thu, 01 Jan 1970 00:00:00 GMT' });
  await t.test('If-Range with the Last-Modified date: 206', async (t) => {
    const res = await get(port, {
      range: 'bytes=0-1',
      'if-range': String(whole.headers['last-modified']),
    });
    t.equal(res.status, 206);
    t.equal(res.headers['content-range'], `bytes 0-1/${String(size)}`);
  });
  // Valid syntax, nothing satisfiable.
  await unsatisfiable(`bytes=${String(size)}-`);
  await unsatisfiable('bytes=999999999-');
  await unsatisfiable('bytes=99999999999999999999-');
  await unsatisfiable('bytes=-0');
  await unsatisfiable(`bytes=${String(size)}-${String(size + 5)},-0`);

  await t.test('HEAD with a Range: the 206 head, no body', async (t) => {
    const res = await get(port, { range: 'bytes=0-1' }, 'HEAD');
    t.equal(res.status, 206);
    t.equal(res.headers['content-range'], `bytes 0-1/${String(size)}`);
    t.equal(res.headers['content-length'], '2');
    t.equal(res.body.length, 0);
  });
  await t.test('a precondition the file fails is 412 precondition_failed, not 500', async (t) => {
    for (const headers of [
      { 'if-match': '"another"' },
      { 'if-match': '"another"', range: 'bytes=0-1' },
      { 'if-unmodified-since': 'Mon, 01 Jan 1990 00:00:00 GMT' },
    ]) {
      const res = await get(port, headers);
      t.equal(res.status, 412, JSON.stringify(headers));
      const body = JSON.parse(res.body.toString()) as { code?: string };
      t.equal(body.code, 'precondition_failed', JSON.stringify(headers));
    }
  });
  await t.test('no descriptor of the file stays open after the answers', async (t) => {
    const open = () =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).endsWith('swagger-ui.css');
        } catch {
          return false;
        }
      }).length;
    for (let i = 0; i < 50 && open() > 0; i++) await sleep(20);
    t.equal(open(), 0);
  });
  await t.test('a Range on an API answer is ignored', async (t) => {
    const res = await get(port, { range: 'bytes=0-1' }, 'GET', '/healthz');
    t.equal(res.status, 200);
    t.same(JSON.parse(res.body.toString()), { status: 'ok' });
  });
});
