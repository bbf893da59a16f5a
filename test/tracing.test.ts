/**
 * Tracing end to end: the application with `tracing.enabled`, its SDK
 * sending OTLP/HTTP JSON to a real HTTP listener of the test, on a real
 * PostgreSQL. A keyed request and its repeat, each carrying the W3C
 * traceparent of one client intent, come back as spans of that trace: the
 * HTTP server span (@fastify/otel) under the client's span, the plugin's
 * `idempotency` span and its children under it, the statements of an
 * attempt under the attempt; the probes make none; and what is buffered
 * is sent when the application closes.
 */
import http from 'node:http';
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { startTestApp } from './harness/app.js';

/** One span as OTLP/HTTP JSON carries it, with its attributes made plain. */
interface SentSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: Record<string, unknown>;
  readonly service: unknown;
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
        attributes: OtlpAttribute[];
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

/** A stand-in for an OpenTelemetry Collector: takes OTLP/HTTP JSON posts and keeps their spans. */
async function otlpSink(t: Parameters<typeof startTestApp>[0]) {
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
              attributes: plain(s.attributes),
              service,
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

const hex = (bytes: number): string =>
  Array.from({ length: bytes }, () =>
    Math.floor(Math.random() * 256)
      .toString(16)
      .padStart(2, '0'),
  ).join('');

void t.test(
  "a keyed request and its repeat are spans of the client's trace, sent by the end",
  async (t) => {
    const sink = await otlpSink(t);
    const k = await startTestApp(t, {
      env: {
        TRACING__ENABLED: 'true',
        TRACING__ENDPOINT: sink.url,
        APP__NAME: 'traced-service',
      },
    });
    // One intent of a client: one trace, a span of its own per attempt.
    const traceId = hex(16);
    const attempts = [hex(8), hex(8)];
    const key = newId();
    const send = (parent: string) =>
      k.app.http.inject({
        method: 'POST',
        url: '/api/v1/effects',
        headers: {
          ...k.alice.headers,
          'content-type': 'application/json',
          'idempotency-key': key,
          traceparent: `00-${traceId}-${parent}-01`,
        },
        payload: JSON.stringify({ label: 'traced' }),
      });
    const first = await send(attempts[0] as string);
    t.equal(first.statusCode, 201);
    const again = await send(attempts[1] as string);
    t.equal(again.headers['idempotent-replay'], 'true');
    t.equal((await k.app.http.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
    t.same(
      (await k.effects()).map((e) => ({ ...e })),
      [{ principal_id: k.alice.id, label: 'traced' }],
      'one effect',
    );
    // The batch is sent at the latest when the application closes.
    await k.app.close();

    t.ok(sink.paths.length > 0, 'the SDK posted to the endpoint');
    t.ok(
      sink.paths.every((p) => p === 'POST /v1/traces application/json'),
      `as OTLP/HTTP JSON (${sink.paths.join(', ')})`,
    );
    t.ok(
      sink.spans.every((s) => s.service === 'traced-service'),
      'service.name is app.name',
    );
    t.same(
      sink.spans.filter((s) => s.attributes['url.path'] === '/readyz'),
      [],
      'no span for the probes',
    );
    // Outside the requests only the process's own statements (the token
    // cache, the key statistics) make spans, each a trace of its own.
    t.same(
      sink.spans
        .filter((s) => s.traceId !== traceId)
        .filter((s) => s.parentSpanId !== '' || s.attributes['db.system.name'] !== 'postgresql'),
      [],
      "every span of the requests is in the client's trace",
    );
    const byId = new Map(sink.spans.map((s) => [s.spanId, s]));
    const ancestors = (s: SentSpan): string[] => {
      const names: string[] = [];
      for (let p = byId.get(s.parentSpanId); p !== undefined; p = byId.get(p.parentSpanId)) {
        names.push(p.name);
      }
      return names;
    };
    const ancestorIds = (s: SentSpan): string[] => {
      const ids: string[] = [];
      for (let p = byId.get(s.parentSpanId); p !== undefined; p = byId.get(p.parentSpanId)) {
        ids.push(p.spanId);
      }
      return ids;
    };
    const requests = sink.spans.filter((s) => s.name === 'request');
    t.same(
      requests.map((s) => [s.parentSpanId, s.kind, s.attributes['http.route']]),
      attempts.map((parent) => [parent, 2, '/api/v1/effects']),
      "one HTTP server span per attempt, each a child of the client's span",
    );
    const ours = sink.spans.filter((s) => s.name === 'idempotency');
    t.same(
      ours.map((s) => s.attributes['idempotency.outcome']).sort(),
      ['replayed', 'stored'],
      'the first stored, the repeat replayed',
    );
    for (const s of ours) {
      t.ok(
        ancestors(s).includes('request'),
        `${String(s.attributes['idempotency.outcome'])} under its request`,
      );
    }
    const children = (name: string) =>
      sink.spans
        .filter((s) => byId.get(s.parentSpanId)?.name === 'idempotency')
        .filter((s) => s.name.startsWith('idempotency.'))
        .filter((s) => byId.get(s.parentSpanId)?.attributes['idempotency.outcome'] === name)
        .map((s) => s.name)
        .sort();
    t.same(children('stored'), [
      'idempotency.attempt',
      'idempotency.commit',
      'idempotency.key_wait',
    ]);
    t.same(children('replayed'), ['idempotency.replay']);
    // The statements of the first request's attempt nest under it: the
    // key's insert, the handler's effect, the savepoint between them.
    const attempt = sink.spans.find((s) => s.name === 'idempotency.attempt');
    const inAttempt = sink.spans
      .filter((s) => s.traceId === traceId && ancestors(s).includes('idempotency.attempt'))
      .filter((s) => attempt !== undefined && ancestorIds(s).includes(attempt.spanId))
      .map((s) => s.name);
    t.ok(
      inAttempt.includes('INSERT idempotency_keys'),
      `the key's insert (${inAttempt.join(', ')})`,
    );
    t.ok(inAttempt.includes('INSERT test_effects'), "the handler's statement");
    t.ok(inAttempt.includes('SAVEPOINT'), 'the savepoint');
    const commit = sink.spans.filter((s) => s.traceId === traceId && s.name === 'COMMIT');
    t.equal(commit.length, 1, 'one COMMIT in the trace');
    t.ok(
      commit[0] !== undefined && ancestors(commit[0]).includes('idempotency'),
      "the COMMIT under the request's idempotency span",
    );
    t.ok(
      sink.spans
        .filter((s) => s.attributes['db.system.name'] === 'postgresql')
        .every((s) => s.kind === 3),
      'statements are CLIENT spans',
    );
    t.notMatch(
      JSON.stringify(sink.spans.map((s) => s.attributes)),
      new RegExp(`${key}|${k.alice.id}|${k.alice.token}|traced"`),
      'no key, owner, token or body in an attribute',
    );
  },
);
