/**
 * A real OpenTelemetry SDK for tests: a tracer provider and the
 * AsyncLocalStorage context manager registered globally, as an
 * application's SDK start does, with the SDK's in-memory exporter behind a
 * simple span processor, so every span ended is there to read at once.
 * The spans read back as a tree of names and chosen attributes.
 */
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  InMemorySpanExporter,
  SimpleSpanProcessor,
  TracerProvider,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace';
import type { Test } from 'tap';

/** One span of a tree: its name, the attributes asked for, its children by start time. */
export interface SpanNode {
  readonly name: string;
  readonly attributes: Record<string, unknown>;
  readonly children: SpanNode[];
}

/** What {@link recordSpans} gives a test. */
export interface SpanRecorder {
  /** Every span ended so far. */
  spans(): ReadableSpan[];
  /**
   * The spans ended so far as trees, roots first by start time.
   *
   * @param keys the attributes to keep on each node (others are left out,
   *   so a tree compares with `t.same` on what the test cares about).
   * @param only keep spans whose name starts with one of these (their
   *   nearest kept ancestor becomes their parent); all when absent.
   */
  trees(keys: readonly string[], only?: readonly string[]): SpanNode[];
  /**
   * Waits until `count` spans named `name` have ended: a span may end a
   * tick after the answer the test awaited (the plugin's ends once the
   * reply has finished).
   *
   * @throws Error after a second without them.
   */
  ended(name: string, count: number): Promise<void>;
  /** Forgets the spans ended so far. */
  reset(): void;
}

/**
 * Registers a tracer provider with an in-memory exporter and the
 * AsyncLocalStorage context manager for the test, and unregisters both in
 * its teardown.
 *
 * @param t the test.
 * @returns the recorder.
 */
export function recordSpans(t: Test): SpanRecorder {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  const contexts = new AsyncLocalStorageContextManager().enable();
  if (!context.setGlobalContextManager(contexts) || !trace.setGlobalTracerProvider(provider)) {
    throw new Error('an OpenTelemetry context manager or tracer provider is already registered');
  }
  t.teardown(async () => {
    await provider.shutdown();
    trace.disable();
    context.disable();
  });
  return {
    spans: () => exporter.getFinishedSpans(),
    trees: (keys, only) => treesOf(exporter.getFinishedSpans(), keys, only),
    ended: async (name, count) => {
      const deadline = performance.now() + 1000;
      const seen = (): number => exporter.getFinishedSpans().filter((s) => s.name === name).length;
      while (seen() < count) {
        if (performance.now() > deadline) {
          throw new Error(
            `${String(count)} spans named ${name} did not end (${String(seen())} did)`,
          );
        }
        await new Promise((r) => setTimeout(r, 1));
      }
    },
    reset: () => {
      exporter.reset();
    },
  };
}

function treesOf(
  spans: readonly ReadableSpan[],
  keys: readonly string[],
  only: readonly string[] | undefined,
): SpanNode[] {
  const byId = new Map(spans.map((s) => [s.spanContext().spanId, s]));
  const kept = (s: ReadableSpan): boolean =>
    only === undefined || only.some((prefix) => s.name.startsWith(prefix));
  const nodes = new Map<ReadableSpan, SpanNode>();
  for (const s of spans) {
    if (!kept(s)) continue;
    const attributes: Record<string, unknown> = {};
    for (const key of keys) if (key in s.attributes) attributes[key] = s.attributes[key];
    nodes.set(s, { name: s.name, attributes, children: [] });
  }
  const start = (s: ReadableSpan): number => s.startTime[0] * 1e9 + s.startTime[1];
  const roots: [ReadableSpan, SpanNode][] = [];
  const children = new Map<SpanNode, ReadableSpan[]>();
  for (const [s, node] of nodes) {
    let parentId = s.parentSpanContext?.spanId;
    let parent: ReadableSpan | undefined;
    for (;;) {
      parent = parentId === undefined ? undefined : byId.get(parentId);
      if (parent === undefined || kept(parent)) break;
      parentId = parent.parentSpanContext?.spanId;
    }
    const parentNode = parent === undefined ? undefined : nodes.get(parent);
    if (parentNode === undefined) roots.push([s, node]);
    else children.set(parentNode, [...(children.get(parentNode) ?? []), s]);
  }
  for (const [node, list] of children) {
    list.sort((a, b) => start(a) - start(b));
    for (const s of list) node.children.push(nodes.get(s) as SpanNode);
  }
  return roots.sort((a, b) => start(a[0]) - start(b[0])).map(([, node]) => node);
}
