/**
 * The SDK's start and shutdown: off registers nothing; on registers one
 * provider, refuses a second with a clear error, and on shutdown sends
 * what is buffered, logging at warn when the endpoint takes nothing.
 */
import net from 'node:net';
import t from 'tap';
import { propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { startTracing, type TracingOptions } from './index.js';

const options: TracingOptions = {
  enabled: true,
  endpoint: 'http://127.0.0.1:1/v1/traces',
  samplingRatio: 1,
  serviceName: 'svc',
  ignorePaths: [],
};

function recordingLog() {
  const lines: { fields: Record<string, unknown>; message: string }[] = [];
  return {
    lines,
    warn: (fields: Record<string, unknown>, message: string) => lines.push({ fields, message }),
  };
}

/** A port nothing listens on: a connection to it is refused at once. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) =>
    server.close(() => {
      resolve();
    }),
  );
  return port;
}

void t.test('off registers nothing and its shutdown does nothing', async (t) => {
  const log = recordingLog();
  const off = startTracing({ ...options, enabled: false }, log);
  t.equal(off.enabled, false);
  t.equal(off.instrument, undefined);
  const span = trace.getTracer('probe').startSpan('x');
  t.equal(span.isRecording(), false, "spans are the API's no-op");
  span.end();
  await off.shutdown();
  t.same(log.lines, []);
});

void t.test('on: one SDK per process, a second is refused, shutdown twice is safe', async (t) => {
  const log = recordingLog();
  const port = await closedPort();
  const on = startTracing(
    { ...options, endpoint: `http://127.0.0.1:${String(port)}/v1/traces` },
    log,
  );
  t.equal(on.enabled, true);
  t.type(on.instrument, 'function');
  t.throws(() => startTracing(options, log), /already registered/);
  const span = trace.getTracer('probe').startSpan('buffered');
  t.equal(span.isRecording(), true, 'spans are recorded');
  span.end();
  await on.shutdown();
  await on.shutdown();
  t.ok(
    log.lines.some((l) => l.message === 'tracing: the spans buffered at shutdown were not sent'),
    'the lost batch is logged at warn',
  );
  const after = trace.getTracer('probe').startSpan('after');
  t.equal(after.isRecording(), false, 'unregistered after shutdown');
  after.end();
  // A fresh start works once the first is shut down.
  const again = startTracing(options, recordingLog());
  await again.shutdown();
});

void t.test(
  'a sampling ratio of 0 records no root span, nor one under a sampled caller',
  async (t) => {
    const on = startTracing({ ...options, samplingRatio: 0 }, recordingLog());
    const span = trace.getTracer('probe').startSpan('root');
    t.equal(span.isRecording(), false);
    span.end();
    // A caller's traceparent that says sampled: the ratio still decides.
    const caller = propagation.extract(ROOT_CONTEXT, {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    });
    const child = trace.getTracer('probe').startSpan('child', {}, caller);
    t.equal(child.isRecording(), false);
    child.end();
    await on.shutdown();
    const all = startTracing(options, recordingLog());
    const kept = trace.getTracer('probe').startSpan(
      'child',
      {},
      propagation.extract(ROOT_CONTEXT, {
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      }),
    );
    t.equal(kept.isRecording(), true, 'a ratio of 1 keeps it');
    t.equal(
      kept.spanContext().traceId,
      '0af7651916cd43dd8448eb211c80319c',
      "in the caller's trace",
    );
    kept.end();
    await all.shutdown();
  },
);
