/**
 * The process's OpenTelemetry SDK, when `tracing.enabled` is set: a tracer
 * provider whose spans go in batches to an OTLP/HTTP endpoint (JSON),
 * sampled at the trace's root by `tracing.sampling_ratio` and otherwise as
 * the caller's `traceparent` says, with the AsyncLocalStorage context
 * manager and the W3C trace context propagator, all registered globally so
 * the idempotency plugin's spans (made through `@opentelemetry/api`) and
 * the HTTP server spans of @fastify/otel land in it. Started before the
 * HTTP server is made, shut down (flushing what is buffered) when the
 * application closes. Disabled, nothing is registered and every span is
 * the API's no-op.
 */
import { context, diag, DiagLogLevel, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Span,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import { FastifyOtelInstrumentation } from '@fastify/otel';
import type { FastifyInstance } from 'fastify';

/** What {@link startTracing} needs: the `tracing` configuration and the service's name. */
export interface TracingOptions {
  /** `tracing.enabled`. */
  readonly enabled: boolean;
  /** `tracing.endpoint`: the OTLP/HTTP traces URL. */
  readonly endpoint: string;
  /** `tracing.sampling_ratio`, 0 to 1. */
  readonly samplingRatio: number;
  /** `app.name`: the resource's `service.name`. */
  readonly serviceName: string;
  /** Paths no HTTP span is made for (the probes, the metrics route). */
  readonly ignorePaths: readonly string[];
}

/** The started SDK, or nothing when tracing is off. */
export interface Tracing {
  /** Whether an SDK is registered. */
  readonly enabled: boolean;
  /**
   * Registers the @fastify/otel plugin, which makes each request's HTTP
   * server span, on a server before anything else; undefined when off.
   */
  readonly instrument: ((app: FastifyInstance) => Promise<void>) | undefined;
  /**
   * Sends what is buffered, then unregisters the SDK. Safe to call twice;
   * never throws (an endpoint that does not answer loses its spans, not the
   * shutdown).
   */
  shutdown(): Promise<void>;
}

/** How long one export may take, the shutdown's flush included, in milliseconds. */
export const EXPORT_TIMEOUT_MS = 2000;

const OFF: Tracing = {
  enabled: false,
  instrument: undefined,
  shutdown: () => Promise.resolve(),
};

/** Where the SDK's own warnings and errors go: the process logger's `warn`. */
export interface TracingLog {
  warn(fields: Record<string, unknown>, message: string): void;
}

/**
 * Starts the SDK when `options.enabled` is set. What the SDK reports
 * (a batch the endpoint refused or never answered: those spans are lost)
 * is logged at warn, one line per report.
 *
 * @param options the configuration.
 * @param log where the SDK's warnings and errors are written.
 * @returns the SDK's handle.
 * @throws Error when another OpenTelemetry tracer provider or context
 *   manager is already registered in the process.
 */
export function startTracing(options: TracingOptions, log: TracingLog): Tracing {
  if (!options.enabled) return OFF;
  // A collector that does not answer delays the shutdown's flush by this
  // much at most, and a batch in the run by this much before it is dropped.
  const exporter = new OTLPTraceExporter({
    url: options.endpoint,
    timeoutMillis: EXPORT_TIMEOUT_MS,
  });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': options.serviceName }),
    // The ratio decides for a trace the server starts and for one whose
    // caller says sampled: a client sends every intent's attempts as
    // sampled, and the ratio must still bound what reaches the collector.
    // The decision is by trace id, so all attempts of one intent (one trace
    // id) are kept or dropped together. A caller's "not sampled" is kept.
    sampler: new ParentBasedSampler({
      root: new TraceIdRatioBasedSampler(options.samplingRatio),
      remoteParentSampled: new TraceIdRatioBasedSampler(options.samplingRatio),
    }),
    spanProcessors: [
      new ScrubbingProcessor(),
      new BatchSpanProcessor({ exporter, exportTimeoutMillis: EXPORT_TIMEOUT_MS }),
    ],
  });
  const contexts = new AsyncLocalStorageContextManager().enable();
  if (!context.setGlobalContextManager(contexts)) {
    contexts.disable();
    throw new Error('tracing: an OpenTelemetry context manager is already registered');
  }
  if (!trace.setGlobalTracerProvider(provider)) {
    context.disable();
    throw new Error('tracing: an OpenTelemetry tracer provider is already registered');
  }
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const report =
    (level: string) =>
    (message: string, ...args: unknown[]): void => {
      log.warn({ otel: level, details: args.map(String) }, `tracing: ${message}`);
    };
  const noop = (): void => undefined;
  diag.setLogger(
    { error: report('error'), warn: report('warn'), info: noop, debug: noop, verbose: noop },
    DiagLogLevel.WARN,
  );
  const ignored = new Set(options.ignorePaths);
  const http = new FastifyOtelInstrumentation({
    // An exception event carries the error's message and stack: a
    // statement's values, a file path. The status message it also sets is
    // scrubbed by ScrubbingProcessor.
    recordExceptions: false,
    // The path without its query: a query string may carry a secret (a
    // token a client put there by mistake) or an id.
    requestHook: (span, request) => {
      span.setAttribute('url.path', withoutQuery(request.url));
    },
    // One span per request: a span per hook would cost more than the
    // stages they time, and the handler's span would be parented on the
    // request's span, taking the handler's statements out from under the
    // idempotency attempt that runs it.
    instrumentHooks: false,
    instrumentHandler: false,
    ignorePaths: (route) => ignored.has(withoutQuery(route.url)),
  });
  http.setTracerProvider(provider);
  let stopping: Promise<void> | undefined;
  return {
    enabled: true,
    instrument: async (app) => {
      await app.register(http.plugin());
    },
    shutdown: () =>
      (stopping ??= (async () => {
        try {
          await provider.shutdown();
        } catch (err) {
          log.warn({ err }, 'tracing: the spans buffered at shutdown were not sent');
        } finally {
          http.disable();
          trace.disable();
          propagation.disable();
          context.disable();
          diag.disable();
        }
      })()),
  };
}

/** A request's path without its query string. */
function withoutQuery(url: string): string {
  const at = url.indexOf('?');
  return at === -1 ? url : url.slice(0, at);
}

/** The tracers whose status messages are error types by construction (no message text). */
const OWN_TRACERS: ReadonlySet<string> = new Set(['fastify-idempotency', 'postgres', 'sync']);

/**
 * Clears the status message of spans made by instrumentations other than
 * ours before they end: @fastify/otel puts the error's message there, and
 * an error's message can quote a statement's values. The status code stays.
 */
class ScrubbingProcessor implements SpanProcessor {
  onStart(): void {
    // Nothing to do when a span starts.
  }

  onEnding(span: Span): void {
    if (OWN_TRACERS.has(span.instrumentationScope.name)) return;
    if (span.status.message !== undefined) span.setStatus({ code: span.status.code });
  }

  onEnd(): void {
    // The span is read-only by now.
  }

  forceFlush(): Promise<void> {
    return Promise.resolve();
  }

  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}
