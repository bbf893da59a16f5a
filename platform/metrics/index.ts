/**
 * Metrics export: the Prometheus implementation of the kernel metrics port,
 * a fan-out over several implementations, and the worker role's listener.
 *
 * @packageDocumentation
 */
export {
  PrometheusMetrics,
  ScrapeTimeoutError,
  type Exposition,
  type PrometheusMetricsOptions,
  type ScrapeGaugeDefinition,
  type ScrapeGauges,
} from './prometheus.js';
export { fanOutMetrics } from './fan-out.js';
export {
  startMetricsListener,
  type MetricsListener,
  type MetricsListenerOptions,
} from './listener.js';
