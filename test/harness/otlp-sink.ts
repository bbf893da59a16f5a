/**
 * A stand-in for an OpenTelemetry Collector in tests: an HTTP listener on
 * 127.0.0.1 that takes OTLP/HTTP JSON posts (what platform/tracing's
 * exporter sends) and keeps their spans with the attributes made plain,
 * so a test can assert the span tree a real process exported.
 */
import http from 'node:http';
import type { Test } from 'tap';

/** One span as OTLP/HTTP JSON carries it, with its attributes made plain. */
export interface SentSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly kind: number;
  readonly start: bigint;
  readonly end: bigint;
  readonly attributes: Record<string, unknown>;
  readonly service: unknown;
  /** The status and events as sent, for what must never be in them. */
  readonly rest: string;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
interface OtlpAttribute {
  key: string;
  value: OtlpValue;
}
interface OtlpBody {
  resourceSpans: {
    resource: { attributes: OtlpAttribute[] };
    scopeSpans: {
      spans: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        startTimeUnixNano: string;
        endTimeUnixNano: string;
        attributes: OtlpAttribute[];
        status?: unknown;
        events?: unknown;
      }[];
    }[];
  }[];
}

function plain(attributes: readonly OtlpAttribute[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const { key, value } of attributes) {
    out[key] =
      value.stringValue ??
      (value.intValue === undefined ? undefined : Number(value.intValue)) ??
      value.boolValue ??
      value.doubleValue;
  }
  return out;
}

/**
 * Starts the sink; the test's teardown closes it.
 *
 * @param t the test.
 * @returns the URL to give `tracing.endpoint`, the spans received so far
 *   (in arrival order) and each post's method, path and content type.
 */
export async function otlpSink(t: Test) {
  const spans: SentSpan[] = [];
  const paths: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      paths.push(`${String(req.method)} ${String(req.url)} ${String(req.headers['content-type'])}`);
      const body = JSON.parse(Buffer.concat(chunks).toString()) as OtlpBody;
      for (const rs of body.resourceSpans) {
        const service = plain(rs.resource.attributes)['service.name'];
        for (const ss of rs.scopeSpans) {
          for (const s of ss.spans) {
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId ?? '',
              name: s.name,
              kind: s.kind,
              start: BigInt(s.startTimeUnixNano),
              end: BigInt(s.endTimeUnixNano),
              attributes: plain(s.attributes),
              service,
              rest: JSON.stringify([s.status, s.events]),
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      ),
  );
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${String(port)}/v1/traces`, spans, paths };
}
