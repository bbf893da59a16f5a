/**
 * The Prometheus implementation of the kernel metrics port, over prom-client
 * with a registry of its own (never prom-client's global one, so two
 * applications in one process, as in tests, cannot collide), and gauges whose
 * values are read when the registry is scraped.
 */
import {
  collectDefaultMetrics,
  Counter as PromCounter,
  Gauge as PromGauge,
  Histogram as PromHistogram,
  Registry,
} from 'prom-client';
import {
  assertSameRegistration,
  DEFAULT_BUCKETS,
  labelValues,
  validateBuckets,
  validateRegistration,
  type Counter,
  type Gauge,
  type Histogram,
  type Labels,
  type Metrics,
  type MetricType,
} from '../../kernel/metrics/index.js';

/** A rendered scrape: the body and the content type it must be served with. */
export interface Exposition {
  /** `text/plain; version=0.0.4; charset=utf-8`. */
  readonly contentType: string;
  /** Every metric of the registry in the Prometheus text format. */
  readonly body: string;
}

/** Options of {@link PrometheusMetrics}. */
export interface PrometheusMetricsOptions {
  /**
   * Also export prom-client's default Node.js process metrics (`process_*`,
   * `nodejs_*`; `metrics.process_metrics`). Off by default. Two of them (event
   * loop lag, garbage collection) keep observing for the life of the process.
   */
  readonly processMetrics?: boolean;
}

/** One gauge of a {@link ScrapeGauges} group. */
export interface ScrapeGaugeDefinition {
  /** Snake case metric name. */
  readonly name: string;
  /** One line describing the metric. */
  readonly help: string;
}

/**
 * Gauges without labels whose values come from one read at scrape time: a
 * database query, for instance, runs once per scrape for the whole group.
 *
 * @typeParam K the names the read's result is keyed by.
 */
export interface ScrapeGauges<K extends string> {
  /** The gauges, by the key of the read's result that holds each value. */
  readonly gauges: Readonly<Record<K, ScrapeGaugeDefinition>>;
  /** Reads every value of the group; its own time limit should be near `timeoutMs`. */
  readonly read: () => Promise<Readonly<Record<K, number>>>;
  /**
   * How long a scrape waits for the read. A read still running when the
   * next scrape comes is joined rather than started again, so at most one
   * read per group is ever in flight.
   */
  readonly timeoutMs: number;
  /**
   * Told when a read fails or times out. The group's gauges are then exported
   * as NaN for that scrape: unknown, rather than a stale value that looks fine.
   */
  readonly onError: (err: unknown) => void;
}

/** Thrown to {@link ScrapeGauges.onError} when a read outlasts its time limit. */
export class ScrapeTimeoutError extends Error {
  override readonly name = 'ScrapeTimeoutError';
  /**
   * @param names the gauges of the group.
   * @param timeoutMs the limit that ran out.
   */
  constructor(names: readonly string[], timeoutMs: number) {
    super(`reading ${names.join(', ')} took longer than ${String(timeoutMs)} ms`);
  }
}

interface Family {
  readonly type: MetricType | 'scrape';
  readonly labelNames: readonly string[];
  readonly buckets: readonly number[];
  readonly instrument: Counter | Histogram | Gauge | undefined;
}

/**
 * {@link Metrics} exported in the Prometheus text format. Registration
 * follows the port's rules (the kernel's validation, the same instrument for
 * an agreeing re-registration); {@link PrometheusMetrics.exposition} renders
 * the registry for a scrape.
 *
 * @example
 * const metrics = new PrometheusMetrics();
 * metrics.counter('jobs_total', 'Jobs run.', ['task']).inc({ task: 'sync:cleanup' });
 * const { contentType, body } = await metrics.exposition();
 */
export class PrometheusMetrics implements Metrics {
  /** The registry every metric of this instance lives in. */
  readonly registry = new Registry();
  readonly #families = new Map<string, Family>();

  /** @param options whether to export the process metrics too. */
  constructor(options: PrometheusMetricsOptions = {}) {
    if (options.processMetrics === true) collectDefaultMetrics({ register: this.registry });
  }

  /** @inheritdoc */
  counter(name: string, help: string, labelNames: readonly string[]): Counter {
    return this.#register('counter', name, help, labelNames, undefined, (declared) => {
      const counter = new PromCounter({
        name,
        help,
        labelNames: [...declared],
        registers: [this.registry],
      });
      return Object.freeze({
        inc(labels?: Labels, value = 1): void {
          const named = promLabels(name, declared, labels);
          if (!Number.isFinite(value) || value < 0) {
            throw new RangeError(`counter ${name} can only go up by a finite amount, got ${value}`);
          }
          counter.inc(named, value);
        },
      });
    }) as Counter;
  }

  /** @inheritdoc */
  histogram(
    name: string,
    help: string,
    labelNames: readonly string[],
    buckets?: readonly number[],
  ): Histogram {
    return this.#register('histogram', name, help, labelNames, buckets, (declared, bounds) => {
      const histogram = new PromHistogram({
        name,
        help,
        labelNames: [...declared],
        buckets: [...bounds],
        registers: [this.registry],
      });
      return Object.freeze({
        observe(labels: Labels, value: number): void {
          const named = promLabels(name, declared, labels);
          assertFinite(name, value);
          histogram.observe(named, value);
        },
      });
    }) as Histogram;
  }

  /** @inheritdoc */
  gauge(name: string, help: string, labelNames: readonly string[]): Gauge {
    return this.#register('gauge', name, help, labelNames, undefined, (declared) => {
      const gauge = new PromGauge({
        name,
        help,
        labelNames: [...declared],
        registers: [this.registry],
      });
      return Object.freeze({
        set(labels: Labels, value: number): void {
          const named = promLabels(name, declared, labels);
          assertFinite(name, value);
          gauge.set(named, value);
        },
      });
    }) as Gauge;
  }

  /**
   * Registers a group of gauges read at scrape time (prom-client `collect`
   * callbacks). Every gauge of the group starts the same read, or joins it,
   * so one scrape costs one read.
   *
   * @param group the gauges, their read, its time limit and the error sink.
   * @throws TypeError on a bad name or help, a name already registered, or a
   *   time limit that is not a positive finite number.
   */
  scrapeGauges<K extends string>(group: ScrapeGauges<K>): void {
    if (!(Number.isFinite(group.timeoutMs) && group.timeoutMs > 0)) {
      throw new TypeError(`a scrape read needs a positive time limit, got ${group.timeoutMs}`);
    }
    const entries = Object.entries(group.gauges) as [K, ScrapeGaugeDefinition][];
    const names = entries.map(([, gauge]) => gauge.name);
    for (const { name, help } of entries.map(([, gauge]) => gauge)) {
      validateRegistration('gauge', name, help, []);
      if (this.#families.has(name)) throw new TypeError(`metric ${name} is already registered`);
    }
    let running: Promise<Readonly<Record<K, number>>> | undefined;
    let scrape: Promise<Readonly<Record<K, number>> | undefined> | undefined;
    const readOnce = async (): Promise<Readonly<Record<K, number>> | undefined> => {
      // A read that outlived the previous scrape is joined, not repeated.
      running ??= group.read().finally(() => {
        running = undefined;
      });
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          reject(new ScrapeTimeoutError(names, group.timeoutMs));
        }, group.timeoutMs);
      });
      try {
        return await Promise.race([running, timeout]);
      } catch (err) {
        group.onError(err);
        return undefined;
      } finally {
        clearTimeout(timer);
      }
    };
    // The registry calls every collect callback before awaiting any, so the
    // gauges of one scrape all find the same pending read here.
    const shared = (): Promise<Readonly<Record<K, number>> | undefined> => {
      if (scrape === undefined) {
        scrape = readOnce();
        void scrape.finally(() => {
          scrape = undefined;
        });
      }
      return scrape;
    };
    for (const [key, { name, help }] of entries) {
      new PromGauge({
        name,
        help,
        registers: [this.registry],
        async collect() {
          const values = await shared();
          const value = values?.[key];
          this.set(typeof value === 'number' && Number.isFinite(value) ? value : Number.NaN);
        },
      });
      this.#families.set(name, {
        type: 'scrape',
        labelNames: [],
        buckets: [],
        instrument: undefined,
      });
    }
  }

  /**
   * Renders every metric for a scrape, running the scrape-time reads first.
   *
   * @returns the text exposition and its content type.
   */
  async exposition(): Promise<Exposition> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  #register(
    type: MetricType,
    name: string,
    help: string,
    rawLabelNames: readonly string[],
    rawBuckets: readonly number[] | undefined,
    make: (
      labelNames: readonly string[],
      buckets: readonly number[],
    ) => Counter | Histogram | Gauge,
  ): Counter | Histogram | Gauge {
    const labelNames = validateRegistration(type, name, help, rawLabelNames);
    const buckets =
      type === 'histogram' ? validateBuckets(name, rawBuckets ?? DEFAULT_BUCKETS) : [];
    const existing = this.#families.get(name);
    if (existing) {
      if (existing.instrument === undefined || existing.type === 'scrape')
        throw new TypeError(`metric ${name} is already registered as a gauge read at scrape time`);
      assertSameRegistration(
        name,
        { type: existing.type, labelNames: existing.labelNames, buckets: existing.buckets },
        { type, labelNames, buckets },
        rawBuckets !== undefined,
      );
      return existing.instrument;
    }
    if (this.registry.getSingleMetric(name) !== undefined) {
      // One of the process metrics: prom-client would throw a less clear error.
      throw new TypeError(`metric ${name} is already registered as a process metric`);
    }
    const instrument = make(labelNames, buckets);
    this.#families.set(name, { type, labelNames, buckets, instrument });
    return instrument;
  }
}

/** The kernel's label check, then the labels as prom-client takes them: strings by name. */
function promLabels(
  name: string,
  labelNames: readonly string[],
  labels: Labels | undefined,
): Record<string, string> {
  const values = labelValues(name, labelNames, labels);
  return Object.fromEntries(labelNames.map((label, i) => [label, values[i] ?? '']));
}

function assertFinite(name: string, value: number): void {
  if (!Number.isFinite(value)) throw new RangeError(`${name} takes finite numbers, got ${value}`);
}
