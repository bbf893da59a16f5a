/**
 * One {@link Metrics} that writes to several: the composition root exports
 * through Prometheus while a test keeps reading back from memory.
 */
import type { Counter, Gauge, Histogram, Metrics } from '../../kernel/metrics/index.js';

/**
 * Combines metrics implementations. Every registration and every write goes
 * to each of them in order; they apply the same kernel rules, so one that
 * refuses a name or a label set refuses it before any other is written.
 *
 * @param sinks the implementations, at least one.
 * @returns the only sink when there is one, else one that writes to all.
 * @throws RangeError when `sinks` is empty.
 */
export function fanOutMetrics(sinks: readonly Metrics[]): Metrics {
  const [first, ...rest] = sinks;
  if (first === undefined) throw new RangeError('fanOutMetrics needs at least one sink');
  if (rest.length === 0) return first;
  return Object.freeze({
    counter(name: string, help: string, labelNames: readonly string[]): Counter {
      const all = sinks.map((sink) => sink.counter(name, help, labelNames));
      return Object.freeze({
        inc: (labels, value) => {
          for (const one of all) one.inc(labels, value);
        },
      } satisfies Counter);
    },
    histogram(
      name: string,
      help: string,
      labelNames: readonly string[],
      buckets?: readonly number[],
    ): Histogram {
      const all = sinks.map((sink) => sink.histogram(name, help, labelNames, buckets));
      return Object.freeze({
        observe: (labels, value) => {
          for (const one of all) one.observe(labels, value);
        },
      } satisfies Histogram);
    },
    gauge(name: string, help: string, labelNames: readonly string[]): Gauge {
      const all = sinks.map((sink) => sink.gauge(name, help, labelNames));
      return Object.freeze({
        set: (labels, value) => {
          for (const one of all) one.set(labels, value);
        },
      } satisfies Gauge);
    },
  });
}
