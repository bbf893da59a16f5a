/**
 * An in-memory implementation of the metrics port: what tests assert on, and
 * what an exporter can render from through {@link InMemoryMetrics.snapshot}.
 */
import {
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
  assertSameRegistration,
} from './metrics.js';

/** One counter or gauge series in a snapshot. */
export interface ValueSeries {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** One cumulative bucket of a histogram series: observations less than or equal to `le`. */
export interface BucketCount {
  readonly le: number;
  readonly count: number;
}

/** One histogram series in a snapshot; the last bucket is `+Inf` and counts every observation. */
export interface HistogramSeries {
  readonly labels: Readonly<Record<string, string>>;
  readonly count: number;
  readonly sum: number;
  readonly buckets: readonly BucketCount[];
}

/** What every family in a snapshot has. */
interface FamilyHead {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
}

/** One registered metric and all its series, as {@link InMemoryMetrics.snapshot} returns it. */
export type FamilySnapshot =
  | (FamilyHead & { readonly type: 'counter' | 'gauge'; readonly series: readonly ValueSeries[] })
  | (FamilyHead & {
      readonly type: 'histogram';
      readonly buckets: readonly number[];
      readonly series: readonly HistogramSeries[];
    });

interface ValueState {
  readonly values: readonly string[];
  value: number;
}

interface HistogramState {
  readonly values: readonly string[];
  readonly observations: number[];
  /** Per bucket (not cumulative), plus one for the observations above the last bound. */
  readonly counts: number[];
  sum: number;
}

interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: MetricType;
  readonly labelNames: readonly string[];
  readonly buckets: readonly number[];
  readonly instrument: Counter | Histogram | Gauge;
  readonly series: Map<string, ValueState | HistogramState>;
}

/**
 * {@link Metrics} held in process memory, with read-back for tests.
 *
 * @example
 * const metrics = new InMemoryMetrics();
 * metrics.counter('jobs_total', 'Jobs run.', ['task']).inc({ task: 'sync:cleanup' });
 * metrics.value('jobs_total', { task: 'sync:cleanup' }); // 1
 */
export class InMemoryMetrics implements Metrics {
  readonly #families = new Map<string, Family>();

  /** @inheritdoc */
  counter(name: string, help: string, labelNames: readonly string[]): Counter {
    return this.#register('counter', name, help, labelNames, undefined) as Counter;
  }

  /** @inheritdoc */
  histogram(
    name: string,
    help: string,
    labelNames: readonly string[],
    buckets?: readonly number[],
  ): Histogram {
    return this.#register('histogram', name, help, labelNames, buckets) as Histogram;
  }

  /** @inheritdoc */
  gauge(name: string, help: string, labelNames: readonly string[]): Gauge {
    return this.#register('gauge', name, help, labelNames, undefined) as Gauge;
  }

  /**
   * Reads a counter or gauge series.
   *
   * @param name a registered counter or gauge.
   * @param labels exactly its label names (omit when it has none).
   * @returns the value, or undefined when the series was never written.
   * @throws TypeError when the name is not registered, is a histogram, or the labels differ.
   */
  value(name: string, labels: Labels = {}): number | undefined {
    const family = this.#family(name);
    if (family.type === 'histogram')
      throw new TypeError(`${name} is a histogram; read it with observations()`);
    const state = family.series.get(seriesKey(labelValues(name, family.labelNames, labels)));
    return (state as ValueState | undefined)?.value;
  }

  /**
   * Reads a histogram series' observations in the order they were made.
   *
   * @param name a registered histogram.
   * @param labels exactly its label names (`{}` when it has none).
   * @returns a copy of the observations; empty when the series was never written.
   * @throws TypeError when the name is not registered, is not a histogram, or the labels differ.
   */
  observations(name: string, labels: Labels): readonly number[] {
    const family = this.#family(name);
    if (family.type !== 'histogram')
      throw new TypeError(`${name} is a ${family.type}; read it with value()`);
    const state = family.series.get(seriesKey(labelValues(name, family.labelNames, labels)));
    return [...((state as HistogramState | undefined)?.observations ?? [])];
  }

  /**
   * Everything registered, sorted by name and each family's series by label
   * values: deterministic output for tests and exporters.
   *
   * @returns a deeply frozen copy that later writes do not change.
   */
  snapshot(): readonly FamilySnapshot[] {
    const families = [...this.#families.values()].sort((a, b) => compare(a.name, b.name));
    return deepFreeze(families.map((family) => snapshotOf(family)));
  }

  #family(name: string): Family {
    const family = this.#families.get(name);
    if (!family) throw new TypeError(`metric ${name} is not registered`);
    return family;
  }

  #register(
    type: MetricType,
    name: string,
    help: string,
    rawLabelNames: readonly string[],
    rawBuckets: readonly number[] | undefined,
  ): Counter | Histogram | Gauge {
    const labelNames = validateRegistration(type, name, help, rawLabelNames);
    const buckets =
      type === 'histogram' ? validateBuckets(name, rawBuckets ?? DEFAULT_BUCKETS) : [];
    const existing = this.#families.get(name);
    if (existing) {
      assertSameRegistration(
        name,
        existing,
        { type, labelNames, buckets },
        rawBuckets !== undefined,
      );
      return existing.instrument;
    }
    const series = new Map<string, ValueState | HistogramState>();
    const instrument = makeInstrument(type, name, labelNames, buckets, series);
    this.#families.set(name, { name, help, type, labelNames, buckets, instrument, series });
    return instrument;
  }
}

function makeInstrument(
  type: MetricType,
  name: string,
  labelNames: readonly string[],
  buckets: readonly number[],
  series: Map<string, ValueState | HistogramState>,
): Counter | Histogram | Gauge {
  const valueState = (labels: Labels | undefined): ValueState => {
    const values = labelValues(name, labelNames, labels);
    const key = seriesKey(values);
    let state = series.get(key) as ValueState | undefined;
    if (!state) {
      state = { values, value: 0 };
      series.set(key, state);
    }
    return state;
  };
  switch (type) {
    case 'counter':
      return Object.freeze({
        inc(labels?: Labels, value = 1): void {
          if (!Number.isFinite(value) || value < 0) {
            throw new RangeError(`counter ${name} can only go up by a finite amount, got ${value}`);
          }
          valueState(labels).value += value;
        },
      });
    case 'gauge':
      return Object.freeze({
        set(labels: Labels, value: number): void {
          assertFinite(name, value);
          valueState(labels).value = value;
        },
      });
    case 'histogram':
      return Object.freeze({
        observe(labels: Labels, value: number): void {
          assertFinite(name, value);
          const values = labelValues(name, labelNames, labels);
          const key = seriesKey(values);
          let state = series.get(key) as HistogramState | undefined;
          if (!state) {
            state = {
              values,
              observations: [],
              counts: new Array<number>(buckets.length + 1).fill(0),
              sum: 0,
            };
            series.set(key, state);
          }
          const index = buckets.findIndex((bound) => value <= bound);
          const slot = index === -1 ? buckets.length : index;
          state.counts[slot] = (state.counts[slot] ?? 0) + 1;
          state.observations.push(value);
          state.sum += value;
        },
      });
  }
}

function snapshotOf(family: Family): FamilySnapshot {
  const head = { name: family.name, help: family.help, labelNames: [...family.labelNames] };
  const states = [...family.series.values()].sort((a, b) => compareValues(a.values, b.values));
  const labelsOf = (values: readonly string[]): Record<string, string> =>
    Object.fromEntries(family.labelNames.map((label, i) => [label, values[i] ?? '']));
  if (family.type === 'histogram') {
    return {
      ...head,
      type: 'histogram',
      buckets: [...family.buckets],
      series: (states as HistogramState[]).map((state) => {
        let running = 0;
        const bounds = [...family.buckets, Number.POSITIVE_INFINITY];
        return {
          labels: labelsOf(state.values),
          count: state.observations.length,
          sum: state.sum,
          buckets: bounds.map((le, i) => {
            running += state.counts[i] ?? 0;
            return { le, count: running };
          }),
        };
      }),
    };
  }
  return {
    ...head,
    type: family.type,
    series: (states as ValueState[]).map((state) => ({
      labels: labelsOf(state.values),
      value: state.value,
    })),
  };
}

function assertFinite(name: string, value: number): void {
  if (!Number.isFinite(value)) throw new RangeError(`${name} takes finite numbers, got ${value}`);
}

// JSON of the ordered values cannot collide, whatever characters the values hold.
function seriesKey(values: readonly string[]): string {
  return JSON.stringify(values);
}

// Code-unit order, not locale order, so snapshots are the same on every machine.
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

// Series of one family have as many values as it has label names.
function compareValues(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < a.length; i++) {
    const c = compare(a[i] ?? '', b[i] ?? '');
    if (c !== 0) return c;
  }
  return 0;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
