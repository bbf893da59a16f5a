/**
 * Metrics: the port modules and platform write counters, histograms and
 * gauges to, its naming rules, and an in-memory implementation for tests.
 *
 * @packageDocumentation
 */
export type { Counter, Gauge, Histogram, Labels, Metrics, MetricType } from './metrics.js';
export {
  assertSameRegistration,
  DEFAULT_BUCKETS,
  labelValues,
  validateBuckets,
  validateRegistration,
} from './metrics.js';
export type { RegisteredFamily } from './metrics.js';
export type { BucketCount, FamilySnapshot, HistogramSeries, ValueSeries } from './in-memory.js';
export { InMemoryMetrics } from './in-memory.js';
