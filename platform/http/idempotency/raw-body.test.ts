/**
 * The body pass-through of keyed requests: bytes kept as they went through,
 * and a request that fails after its parser stopped listening (the body
 * read, or refused as too large) crashes nothing.
 */
import { PassThrough } from 'node:stream';
import { setImmediate as tick } from 'node:timers/promises';
import t from 'tap';
import { keepBytes } from './raw-body.js';

void t.test('the chunks that went through are kept', async (t) => {
  const payload = new PassThrough();
  const { stream, chunks } = keepBytes(payload);
  const read: Buffer[] = [];
  stream.on('data', (c: Buffer) => read.push(c));
  payload.end('{"a":1}');
  await new Promise((resolve) => stream.on('end', resolve));
  t.equal(Buffer.concat(chunks).toString(), '{"a":1}');
  t.equal(Buffer.concat(read).toString(), '{"a":1}');
});

void t.test('an error or abort of the request reaches a parser that listens', async (t) => {
  const payload = new PassThrough();
  const { stream } = keepBytes(payload);
  const seen = new Promise<Error>((resolve) => stream.once('error', resolve));
  payload.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
  t.match(await seen, { code: 'ECONNRESET' });
});

void t.test(
  'a request that fails once nobody listens to the pass-through crashes nothing',
  async (t) => {
    for (const when of ['after the body was read', 'after the parser gave up mid-body'] as const) {
      const payload = new PassThrough();
      // The request's own listener, as Node.js's server has one once a
      // parser attached: destroy then emits 'error' on the request.
      payload.on('error', () => undefined);
      const { stream } = keepBytes(payload);
      const onError = () => undefined;
      stream.on('error', onError);
      stream.on('data', () => undefined);
      if (when === 'after the body was read') {
        payload.end('{}');
        await new Promise((resolve) => stream.on('end', resolve));
      } else {
        payload.write('{"a":');
        await tick();
      }
      // Fastify's body reader removes its listeners when it is done (or on 413).
      stream.off('error', onError);
      // The client goes away while the handler runs (found by the fuzz).
      payload.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
      await tick();
      await tick();
      t.ok(stream.destroyed, `${when}: the pass-through is closed`);
    }
  },
);
