/**
 * The metrics port: counters, histograms and gauges that modules and platform
 * write to. The shape follows prom-client closely so that a Prometheus
 * exporter can implement it without adapting callers, and the naming rules
 * live here so every implementation refuses the same mistakes.
 */

/** Label values of one series, by label name. Numbers are recorded as their decimal string. */
export type Labels = Readonly<Record<string, string | number>>;

/** A value that only goes up (requests served, jobs run). */
export interface Counter {
  /**
   * Adds to the series named by `labels`.
   *
   * @param labels exactly the declared label names; omit when none are declared.
   * @param value how much to add: finite and not negative (default 1).
   * @throws TypeError when the labels differ from the declared ones.
   * @throws RangeError when `value` is negative or not finite.
   */
  inc(labels?: Labels, value?: number): void;
}

/** A distribution of observed values (durations, sizes) counted into buckets. */
export interface Histogram {
  /**
   * Records one observation in the series named by `labels`.
   *
   * @param labels exactly the declared label names (`{}` when none are declared).
   * @param value the observation: a finite number.
   * @throws TypeError when the labels differ from the declared ones.
   * @throws RangeError when `value` is not finite.
   */
  observe(labels: Labels, value: number): void;
}

/** A value that goes up and down (queue depth, open connections). */
export interface Gauge {
  /**
   * Sets the series named by `labels`.
   *
   * @param labels exactly the declared label names (`{}` when none are declared).
   * @param value the new value: a finite number.
   * @throws TypeError when the labels differ from the declared ones.
   * @throws RangeError when `value` is not finite.
   */
  set(labels: Labels, value: number): void;
}

/**
 * Where instruments come from. Registering a name that is already registered
 * returns the existing instrument when kind, label names (in any order) and
 * buckets agree, so two call sites can share one metric; a disagreement is a
 * programming error and throws.
 *
 * Names and label names are snake case (`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`); by
 * Prometheus convention counters end in `_total` and carry their unit
 * (`_seconds`, `_bytes`) before it.
 */
export interface Metrics {
  /**
   * Registers (or returns) a counter.
   *
   * @param name snake case metric name, e.g. `jobs_total`.
   * @param help one line describing the metric.
   * @param labelNames the label names every use must give.
   * @returns the counter.
   * @throws TypeError on a bad name, label name or help, or a disagreeing registration.
   */
  counter(name: string, help: string, labelNames: readonly string[]): Counter;
  /**
   * Registers (or returns) a histogram.
   *
   * @param name snake case metric name, e.g. `job_duration_seconds`.
   * @param help one line describing the metric.
   * @param labelNames the label names every use must give (`le` is reserved).
   * @param buckets upper bounds, finite and strictly increasing; {@link DEFAULT_BUCKETS}
   *   when omitted (a re-registration without buckets accepts the registered ones).
   * @returns the histogram.
   * @throws TypeError on a bad name, label name, help or buckets, or a disagreeing registration.
   */
  histogram(
    name: string,
    help: string,
    labelNames: readonly string[],
    buckets?: readonly number[],
  ): Histogram;
  /**
   * Registers (or returns) a gauge.
   *
   * @param name snake case metric name, e.g. `queue_depth`.
   * @param help one line describing the metric.
   * @param labelNames the label names every use must give.
   * @returns the gauge.
   * @throws TypeError on a bad name, label name or help, or a disagreeing registration.
   */
  gauge(name: string, help: string, labelNames: readonly string[]): Gauge;
}

/** The kinds of instrument. */
export type MetricType = 'counter' | 'histogram' | 'gauge';

/** prom-client's default buckets, in seconds: suited to request and job durations. */
export const DEFAULT_BUCKETS: readonly number[] = Object.freeze([
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
]);

const SNAKE_CASE = /^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/;

/** Label names Prometheus gives a meaning of its own, per metric type. */
const RESERVED_LABELS: Readonly<Record<MetricType, readonly string[]>> = {
  counter: [],
  gauge: [],
  histogram: ['le'],
};

/**
 * Checks a metric's name, help and label names, the rules every
 * implementation of {@link Metrics} applies at registration.
 *
 * @param type the kind of instrument, for its reserved label names.
 * @param name the metric name.
 * @param help the help text.
 * @param labelNames the declared label names.
 * @returns the label names, copied and frozen.
 * @throws TypeError naming the bad value.
 */
export function validateRegistration(
  type: MetricType,
  name: string,
  help: string,
  labelNames: readonly string[],
): readonly string[] {
  if (!SNAKE_CASE.test(name)) {
    throw new TypeError(
      `metric name ${JSON.stringify(name)} must be snake case (${SNAKE_CASE.source})`,
    );
  }
  if (help.trim() === '') throw new TypeError(`metric ${name} needs a help text`);
  const seen = new Set<string>();
  for (const label of labelNames) {
    if (!SNAKE_CASE.test(label)) {
      throw new TypeError(
        `label name ${JSON.stringify(label)} of ${name} must be snake case (${SNAKE_CASE.source})`,
      );
    }
    if (RESERVED_LABELS[type].includes(label)) {
      throw new TypeError(`label name "${label}" is reserved for a ${type} (${name})`);
    }
    if (seen.has(label)) throw new TypeError(`label name "${label}" is declared twice on ${name}`);
    seen.add(label);
  }
  return Object.freeze([...labelNames]);
}

/**
 * Checks histogram buckets.
 *
 * @param name the metric, for the message.
 * @param buckets upper bounds.
 * @returns the bounds, copied and frozen.
 * @throws TypeError when empty, not finite or not strictly increasing.
 */
export function validateBuckets(name: string, buckets: readonly number[]): readonly number[] {
  if (buckets.length === 0) throw new TypeError(`histogram ${name} needs at least one bucket`);
  let previous = Number.NEGATIVE_INFINITY;
  for (const bound of buckets) {
    // +Inf is always added by the exporter; an explicit one would be a duplicate.
    if (!Number.isFinite(bound)) throw new TypeError(`buckets of ${name} must be finite numbers`);
    if (bound <= previous) throw new TypeError(`buckets of ${name} must be strictly increasing`);
    previous = bound;
  }
  return Object.freeze([...buckets]);
}

/**
 * Orders a series' label values by the declared label names, refusing
 * missing and unknown labels: a typo in a label name would otherwise make a
 * silent new series.
 *
 * @param name the metric, for the message.
 * @param labelNames the declared label names.
 * @param labels the labels given on use.
 * @returns the values as strings, in declared order.
 * @throws TypeError on a missing or unknown label.
 */
export function labelValues(
  name: string,
  labelNames: readonly string[],
  labels: Labels = {},
): readonly string[] {
  for (const key of Object.keys(labels)) {
    if (!labelNames.includes(key)) throw new TypeError(`unknown label "${key}" for ${name}`);
  }
  return labelNames.map((label) => {
    const value = labels[label];
    if (value === undefined) throw new TypeError(`missing label "${label}" for ${name}`);
    return String(value);
  });
}

/** What a registered family was declared with, for {@link assertSameRegistration}. */
export interface RegisteredFamily {
  readonly type: MetricType;
  readonly labelNames: readonly string[];
  readonly buckets: readonly number[];
}

/**
 * The rule for registering a name twice, shared by every implementation: the
 * same instrument comes back only when kind and label names agree, and (for a
 * histogram registered again with explicit buckets) the buckets too.
 *
 * @param name the metric name.
 * @param existing what the name was first registered with.
 * @param wanted what the second registration asks for (validated).
 * @param bucketsGiven whether the second registration passed buckets explicitly.
 * @throws TypeError naming the disagreement.
 */
export function assertSameRegistration(
  name: string,
  existing: RegisteredFamily,
  wanted: RegisteredFamily,
  bucketsGiven: boolean,
): void {
  if (existing.type !== wanted.type) {
    throw new TypeError(`metric ${name} is already registered as a ${existing.type}`);
  }
  const labels = existing.labelNames;
  if (
    labels.length !== wanted.labelNames.length ||
    !labels.every((l) => wanted.labelNames.includes(l))
  ) {
    throw new TypeError(
      `metric ${name} is already registered with label names [${labels.join(', ')}], not [${wanted.labelNames.join(', ')}]`,
    );
  }
  const sameBuckets =
    existing.buckets.length === wanted.buckets.length &&
    existing.buckets.every((b, i) => b === wanted.buckets[i]);
  if (bucketsGiven && !sameBuckets) {
    throw new TypeError(
      `histogram ${name} is already registered with buckets [${existing.buckets.join(', ')}]`,
    );
  }
}
