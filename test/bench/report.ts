/**
 * The benchmark's report: the ratios judged against the targets of the
 * performance chapter, the table printed on stdout, and the bar chart (SVG)
 * that docs/performance.md embeds. Pure functions of the measured figures.
 */

/** Figures of one load scenario, as measured. */
export interface ScenarioFigures {
  /** Short identifier, e.g. `keyed`. */
  readonly id: string;
  /** What was measured, for the table and the chart. */
  readonly label: string;
  readonly rps: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly requests: number;
  /** Answers that were not 2xx, and socket errors or timeouts. */
  readonly non2xx: number;
  readonly errors: number;
  /** CPU microseconds per request of the server process and of PostgreSQL. */
  readonly nodeCpuUs: number;
  readonly pgCpuUs: number;
  /**
   * Writes to PostgreSQL per request: the write system calls of the process
   * that talks to it (the server, or the bench itself for the in-process
   * ceiling) per request, less the one that sends the HTTP answer. Each is
   * one round trip's send: statements postgres.js pipelines go in one.
   */
  readonly pgWrites: number;
  /**
   * CPU microseconds per request of the load generator (autocannon in the
   * bench's process) on the same cores; 0 for the in-process scenarios,
   * whose callers' CPU is in `nodeCpuUs`.
   */
  readonly loadCpuUs: number;
}

/**
 * The client scenario (test/bench/client.ts): the built command line's
 * `client transfer` on an outbox with nothing pending, beside a bare
 * `node -e 0` and the same HTTP exchanges made from the bench's process,
 * in milliseconds. Every figure is NaN when the scenario did not run.
 */
export interface ClientFigures {
  /** Measured runs (0 when the scenario did not run). */
  readonly runs: number;
  readonly nodeMedianMs: number;
  /** `GET /api/v1/me` and the keyed `POST /api/v1/transfers`, one connection. */
  readonly httpMedianMs: number;
  readonly transferMedianMs: number;
  readonly transferMaxMs: number;
  /** Per run: the transfer's wall time less `node -e 0` and the exchanges of that run. */
  readonly overheadMedianMs: number;
  readonly overheadMaxMs: number;
  /** From the arrival of the transfer's last output (its result line) to its exit. */
  readonly exitAfterWriteMedianMs: number;
  readonly exitAfterWriteMaxMs: number;
}

/** All the measured figures of one run. */
export interface BenchFigures {
  readonly scenarios: readonly ScenarioFigures[];
  /** Bursts of identical keyed requests. */
  readonly bursts: {
    readonly count: number;
    readonly size: number;
    readonly medianMs: number;
    readonly maxMs: number;
    /** Transfers made per burst, each burst; every entry must be 1. */
    readonly effectsPerBurst: readonly number[];
    /** Answers by kind over all bursts. */
    readonly answers: Readonly<Record<string, number>>;
  };
  /** Cleanup of expired keys, alone and under keyed load. */
  readonly cleanup: {
    readonly rows: number;
    readonly aloneRowsPerSecond: number;
    /**
     * The same rows deleted by the job's own statement in a bare loop of
     * the same batch size, same run: the limit the cleanup is judged
     * against (the machine's noise moved an absolute rate by 2x).
     */
    readonly bareDeleteRowsPerSecond: number;
    readonly underLoadRowsPerSecond: number;
  };
  /** The command line's wall time and exit. */
  readonly client: ClientFigures;
  /**
   * What the traced server's collector received, when the traced
   * scenarios ran: the requests sent to that server (warm-ups included),
   * the `request` spans received (one per request, every request sampled)
   * and all spans received. Fewer request spans than requests means the
   * SDK dropped spans, and the traced windows did less export work than
   * tracing costs.
   */
  readonly tracing?: {
    readonly sent: number;
    readonly requestSpans: number;
    readonly spans: number;
  };
}

/** One target, judged. */
export interface TargetResult {
  readonly name: string;
  /** The measured value. */
  readonly value: number;
  /** `>=` or `<=` the threshold. */
  readonly op: '>=' | '<=';
  readonly threshold: number;
  readonly met: boolean;
}

/**
 * Finds a scenario's figures by id.
 *
 * @param figures the run.
 * @param id the scenario id.
 * @returns its figures.
 * @throws Error when the run has no such scenario.
 */
export function scenario(figures: BenchFigures, id: string): ScenarioFigures {
  const found = figures.scenarios.find((s) => s.id === id);
  if (found === undefined) throw new Error(`the run has no scenario "${id}"`);
  return found;
}

function judge(name: string, value: number, op: '>=' | '<=', threshold: number): TargetResult {
  const met = Number.isFinite(value) && (op === '>=' ? value >= threshold : value <= threshold);
  return { name, value, op, threshold, met };
}

/**
 * Judges the run against the targets of the performance issue
 * (docs/performance.md, "Targets").
 *
 * @param figures the run; needs scenarios limit_unkeyed, ceiling_unkeyed,
 *   unkeyed, keyed, read, replay, keyed_1m, cleanup_without, cleanup_during
 *   and peer, and the client figures.
 * @returns one result per target, in the chapter's order.
 * @throws Error when a scenario is missing.
 */
export function judgeTargets(figures: BenchFigures): TargetResult[] {
  const rps = (id: string): number => scenario(figures, id).rps;
  const bursts = figures.bursts.effectsPerBurst;
  return [
    judge('unkeyed HTTP / in-process ceiling', rps('unkeyed') / rps('ceiling_unkeyed'), '>=', 0.8),
    judge('keyed / unkeyed throughput', rps('keyed') / rps('unkeyed'), '>=', 0.85),
    judge(
      'replay / authenticated read of the same resource',
      rps('replay') / rps('read'),
      '>=',
      0.9,
    ),
    judge('keyed at 1M keys / at 0 keys', rps('keyed_1m') / rps('keyed'), '>=', 0.95),
    judge('ours / peer keyed throughput', rps('keyed') / rps('peer'), '>=', 0.9),
    judge(
      'keyed p99 during cleanup / without',
      scenario(figures, 'cleanup_during').p99Ms / scenario(figures, 'cleanup_without').p99Ms,
      '<=',
      1.3,
    ),
    judge(
      'cleanup alone / bare batched DELETE of the same rows',
      figures.cleanup.aloneRowsPerSecond / figures.cleanup.bareDeleteRowsPerSecond,
      '>=',
      0.8,
    ),
    judge(
      'effects per burst of identical requests (all bursts)',
      bursts.length > 0 && bursts.every((n) => n === 1) ? 1 : 0,
      '>=',
      1,
    ),
    judge(
      'in-process ceiling / physical limit, unkeyed',
      rps('ceiling_unkeyed') / rps('limit_unkeyed'),
      '>=',
      0.5,
    ),
    judge(
      'client transfer less node -e 0 and its HTTP exchanges, median ms',
      figures.client.overheadMedianMs,
      '<=',
      60,
    ),
    judge(
      'client exit after its last write, median ms',
      figures.client.exitAfterWriteMedianMs,
      '<=',
      20,
    ),
  ];
}

/**
 * What the HTTP floor allows the target "unkeyed HTTP / in-process
 * ceiling": the ceiling's CPU per call (its Node.js, callers included, and
 * PostgreSQL) over that plus the floor's per request (the bare Fastify
 * server and the load generator, which the ceiling does not pay; not
 * PostgreSQL's, which the floor does not use), on the
 * same cores. It is the ratio a server that added nothing to bare Fastify
 * would reach, as far as throughput follows CPU per request.
 *
 * @param figures the run; uses ceiling_unkeyed and the floor scenario.
 * @param floorId the floor scenario: `http_floor` (answers at once, the
 *   default) or `http_floor_held` (each answer held for the baseline's
 *   mean latency, see {@link floorHoldMs}).
 * @returns the bound, or NaN when either scenario did not run.
 */
export function httpFloorBound(
  figures: BenchFigures,
  floorId: 'http_floor' | 'http_floor_held' = 'http_floor',
): number {
  const ceiling = figures.scenarios.find((s) => s.id === 'ceiling_unkeyed');
  const floor = figures.scenarios.find((s) => s.id === floorId);
  if (ceiling === undefined || floor === undefined) return NaN;
  const call = ceiling.nodeCpuUs + ceiling.pgCpuUs;
  // The floor has no database: PostgreSQL's CPU in its window is the
  // server's own background work, which the ceiling's window pays too.
  return call / (call + floor.nodeCpuUs + floor.loadCpuUs);
}

/**
 * How long the held floor keeps each answer: the unkeyed baseline's mean
 * time in flight by Little's law (connections over rate), less what the
 * floor itself takes to answer (the plain floor's latency), so its round
 * trip is the baseline's. A server whose answers wait costs Node.js and
 * the load generator more per request than one that answers at once (more
 * wake-ups, timers re-armed, answers read one by one), so the floor held
 * this long is what bare Fastify costs at the latency the baseline has.
 * Node.js timers count whole milliseconds, so the hold is that much
 * coarse.
 *
 * @param connections the load's concurrent connections.
 * @param baselineRps the unkeyed baseline's latest requests per second.
 * @param floorMs the plain floor's latency in milliseconds (0 when it did
 *   not run).
 * @returns milliseconds; 0 while there is no positive baseline rate.
 */
export function floorHoldMs(connections: number, baselineRps: number, floorMs = 0): number {
  if (!(baselineRps > 0)) return 0;
  return Math.max(0, (connections * 1000) / baselineRps - Math.max(0, floorMs));
}

/**
 * The floors' bounds in one line beside the measured ratio, for the report
 * and for a run of a subset: the plain floor's, then the held floor's.
 *
 * @param figures the run.
 * @returns the line, without a newline; empty when the ceiling or both
 *   floors did not run.
 */
export function formatFloorBound(figures: BenchFigures): string {
  const plain = httpFloorBound(figures, 'http_floor');
  const held = httpFloorBound(figures, 'http_floor_held');
  if (Number.isNaN(plain) && Number.isNaN(held)) return '';
  const unkeyed = figures.scenarios.find((s) => s.id === 'unkeyed');
  const ceiling = figures.scenarios.find((s) => s.id === 'ceiling_unkeyed');
  const measured = unkeyed === undefined || ceiling === undefined ? NaN : unkeyed.rps / ceiling.rps;
  const bounds: string[] = [];
  if (!Number.isNaN(plain)) {
    bounds.push(
      `${fixed(plain, 2)} by the HTTP floor's CPU per request (a server adding nothing to bare Fastify)`,
    );
  }
  if (!Number.isNaN(held)) {
    bounds.push(`${fixed(held, 2)} with each answer held for the baseline's mean latency`);
  }
  return `unkeyed HTTP / in-process ceiling: bound ${bounds.join(', ')}, measured ${fixed(measured, 2)}`;
}

/**
 * What tracing costs per request: each traced scenario (our server with
 * every request sampled and exported) against its untraced twin of the
 * same rounds, as the throughput ratio and the Node.js and PostgreSQL
 * CPU it adds per request.
 *
 * @param figures the run; uses unkeyed, keyed, traced_unkeyed and
 *   traced_keyed.
 * @returns a line per pair that ran, joined by newlines; empty when no
 *   traced scenario ran beside its twin.
 */
export function formatTracingCost(figures: BenchFigures): string {
  const lines: string[] = [];
  for (const id of ['unkeyed', 'keyed']) {
    const off = figures.scenarios.find((s) => s.id === id);
    const on = figures.scenarios.find((s) => s.id === `traced_${id}`);
    if (off === undefined || on === undefined) continue;
    const added = (a: number, b: number): string => {
      const d = Math.round(a - b);
      return d >= 0 ? `+${String(d)}` : String(d);
    };
    lines.push(
      `tracing on / off, ${id}: req/s ${fixed(on.rps / off.rps, 2)}, Node.js ${added(on.nodeCpuUs, off.nodeCpuUs)} us/req, PostgreSQL ${added(on.pgCpuUs, off.pgCpuUs)} us/req`,
    );
  }
  const got = figures.tracing;
  if (lines.length > 0 && got !== undefined) {
    const short = got.sent - got.requestSpans;
    lines.push(
      `tracing on: ${String(got.requestSpans)} request spans received of ${String(got.sent)} requests sent${short > 0 ? ` (${String(short)} short: spans dropped, so the cost above is understated)` : ''}, ${fixed(got.spans / Math.max(1, got.requestSpans), 1)} spans per request`,
    );
  }
  return lines.join('\n');
}

function fixed(n: number, digits: number): string {
  return Number.isFinite(n) ? n.toFixed(digits) : String(n);
}

function pad(cells: readonly string[], widths: readonly number[]): string {
  return cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ');
}

/**
 * Renders a table of rows as aligned plain text.
 *
 * @param header the column names.
 * @param rows the cells.
 * @returns the text, one line per row after the header and a rule.
 */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  return [pad(header, widths), widths.map((w) => '-'.repeat(w)).join('  ')]
    .concat(rows.map((r) => pad(r, widths)))
    .join('\n');
}

/**
 * The scenarios as a table: throughput, latency, answers and CPU per request.
 *
 * @param figures the run.
 * @returns the text.
 */
export function formatScenarios(figures: BenchFigures): string {
  return table(
    [
      'scenario',
      'req/s',
      'p50 ms',
      'p99 ms',
      'requests',
      'non-2xx',
      'errors',
      'node us/req',
      'pg us/req',
      'pg writes/req',
      'load us/req',
    ],
    figures.scenarios.map((s) => [
      s.label,
      fixed(s.rps, 0),
      fixed(s.p50Ms, 1),
      fixed(s.p99Ms, 1),
      String(s.requests),
      String(s.non2xx),
      String(s.errors),
      fixed(s.nodeCpuUs, 0),
      fixed(s.pgCpuUs, 0),
      fixed(s.pgWrites, 1),
      fixed(s.loadCpuUs, 0),
    ]),
  );
}

/**
 * The client scenario in one line, for the report and for a run of a
 * subset (`--only client`).
 *
 * @param c the client figures of the run.
 * @returns the line, without a newline; empty when the scenario did not run.
 */
export function formatClient(c: ClientFigures): string {
  if (c.runs === 0) return '';
  return `client transfer, ${String(c.runs)} runs: median ${fixed(c.transferMedianMs, 1)} ms, max ${fixed(c.transferMaxMs, 1)} ms (node -e 0 median ${fixed(c.nodeMedianMs, 1)} ms, its HTTP exchanges median ${fixed(c.httpMedianMs, 1)} ms); over both: median ${fixed(c.overheadMedianMs, 1)} ms, max ${fixed(c.overheadMaxMs, 1)} ms; exit after its last write: median ${fixed(c.exitAfterWriteMedianMs, 1)} ms, max ${fixed(c.exitAfterWriteMaxMs, 1)} ms`;
}

/**
 * The report printed on stdout: the scenarios, the bursts, the cleanup, the
 * client and the targets.
 *
 * @param figures the run.
 * @returns the text.
 */
export function formatReport(figures: BenchFigures): string {
  const scenarios = formatScenarios(figures);
  const b = figures.bursts;
  const bursts = `bursts: ${String(b.count)} x ${String(b.size)} identical keyed transfers, all answered in median ${fixed(b.medianMs, 1)} ms, max ${fixed(b.maxMs, 1)} ms; effects per burst: ${[...new Set(b.effectsPerBurst)].join(', ')}; answers: ${Object.entries(
    b.answers,
  )
    .map(([k, v]) => `${k} ${String(v)}`)
    .join(', ')}`;
  const c = figures.cleanup;
  const cleanup = `cleanup of ${String(c.rows)} expired keys: alone ${fixed(c.aloneRowsPerSecond, 0)} rows/s (bare batched DELETE ${fixed(c.bareDeleteRowsPerSecond, 0)} rows/s), under keyed load ${fixed(c.underLoadRowsPerSecond, 0)} rows/s`;
  const targets = table(
    ['target', 'measured', 'goal', 'verdict'],
    judgeTargets(figures).map((t) => [
      t.name,
      fixed(t.value, t.value >= 1000 ? 0 : 2),
      `${t.op} ${String(t.threshold)}`,
      t.met ? 'met' : 'MISSED',
    ]),
  );
  const client = formatClient(figures.client);
  const floor = formatFloorBound(figures);
  const tracing = formatTracingCost(figures);
  return `${scenarios}\n\n${bursts}\n${cleanup}\n${client === '' ? '' : `${client}\n`}\n${targets}\n${floor === '' ? '' : `${floor}\n`}${tracing === '' ? '' : `${tracing}\n`}`;
}

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/**
 * A horizontal bar chart of throughput per scenario, with p99 beside each
 * bar, as a self-contained SVG document.
 *
 * @param figures the run.
 * @param caption a line under the title (machine, date).
 * @returns the SVG text.
 */
export function renderChart(figures: BenchFigures, caption: string): string {
  const rows = figures.scenarios;
  const max = Math.max(1, ...rows.map((s) => s.rps));
  const left = 300;
  const barMax = 420;
  const rowH = 34;
  const top = 70;
  const width = left + barMax + 180;
  const height = top + rows.length * rowH + 30;
  const bars = rows
    .map((s, i) => {
      const y = top + i * rowH;
      const w = Math.max(1, Math.round((s.rps / max) * barMax));
      return [
        `<text x="${String(left - 10)}" y="${String(y + 21)}" text-anchor="end">${escapeXml(s.label)}</text>`,
        `<rect x="${String(left)}" y="${String(y + 6)}" width="${String(w)}" height="22" fill="#4a78b5"/>`,
        `<text x="${String(left + w + 8)}" y="${String(y + 21)}">${fixed(s.rps, 0)} req/s, p99 ${fixed(s.p99Ms, 1)} ms</text>`,
      ].join('');
    })
    .join('\n');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${String(width)}" height="${String(height)}" viewBox="0 0 ${String(width)} ${String(height)}" font-family="sans-serif" font-size="13">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="20" y="28" font-size="17" font-weight="bold">Transfer route: throughput by scenario (higher is better)</text>
<text x="20" y="50" fill="#555555">${escapeXml(caption)}</text>
${bars}
</svg>
`;
}
