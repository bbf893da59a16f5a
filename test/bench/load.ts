/**
 * Load generation for the benchmark: autocannon against a listening server,
 * with CPU time of the server and of PostgreSQL sampled around the measured
 * window, and a burst driver that fires identical requests at once over
 * their own sockets.
 */
import http from 'node:http';
import autocannon from 'autocannon';
import { processCpuMicros, processWrites, treeCpuMicros } from './proc.js';

/** One request as autocannon sends it. */
export interface LoadRequest {
  readonly headers: Record<string, string>;
  /** The body; none for a read. */
  readonly body?: string;
  /** POST unless given. */
  readonly method?: 'GET' | 'POST';
  /** The load's path unless given. */
  readonly path?: string;
}

/** Settings of one measured load. */
export interface LoadOptions {
  /** Base URL of the server, e.g. http://127.0.0.1:3000. */
  readonly url: string;
  /** Path of every request that names none of its own. */
  readonly path: string;
  /** Concurrent connections. */
  readonly connections: number;
  /** Seconds to measure; with `during`, the most to wait for it. */
  readonly seconds: number;
  /** Builds each request (called once per request). */
  readonly next: () => LoadRequest;
  /** Server process and postmaster pids, for CPU time. */
  readonly serverPid: number;
  readonly postmasterPid: number;
  /** The most requests per second over all connections; unlimited when absent. */
  readonly overallRate?: number;
  /** Called once the measured window has started; its promise ends the window early when it resolves. */
  readonly during?: () => Promise<unknown>;
}

/** What one measured load produced. */
export interface LoadFigures {
  readonly requests: number;
  readonly seconds: number;
  readonly rps: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly non2xx: number;
  readonly errors: number;
  /** Answers by status code. */
  readonly statuses: Record<string, number>;
  /** Server process CPU per request, in microseconds. */
  readonly nodeCpuUsPerRequest: number;
  /** PostgreSQL CPU (postmaster and backends) per request, in microseconds. */
  readonly pgCpuUsPerRequest: number;
  /**
   * Writes to PostgreSQL per request: the server's write system calls per
   * request, less the one of its HTTP answer (the bench runs it at log
   * level warn, so it writes no log lines).
   */
  readonly pgWritesPerRequest: number;
  /**
   * CPU per request of the load generator (autocannon, in the bench's own
   * process), which shares the machine's cores with the server and
   * PostgreSQL; 0 where the caller is the process measured (the ceiling,
   * the limit), whose own CPU is the Node.js figure.
   */
  readonly loadCpuUsPerRequest: number;
}

/**
 * Runs autocannon for a fixed time (or until `during` settles) and reports
 * throughput, latency and CPU per request.
 *
 * @param options where, how hard, how long and what to send.
 * @returns the figures of the window.
 */
export async function measure(options: LoadOptions): Promise<LoadFigures> {
  const node0 = processCpuMicros(options.serverPid);
  const pg0 = treeCpuMicros(options.postmasterPid);
  const writes0 = processWrites(options.serverPid);
  const load0 = process.cpuUsage();
  const started = performance.now();
  let instance: autocannon.Instance | undefined;
  const finished = new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        duration: options.seconds,
        ...(options.overallRate === undefined ? {} : { overallRate: options.overallRate }),
        requests: [
          {
            method: 'POST',
            path: options.path,
            setupRequest: (req) => {
              const r = options.next();
              return {
                ...req,
                method: r.method ?? 'POST',
                path: r.path ?? options.path,
                headers: { ...r.headers },
                ...(r.body === undefined ? {} : { body: r.body }),
              };
            },
          },
        ],
      },
      (err, result) => {
        if (err !== null && err !== undefined) reject(err as Error);
        else resolve(result);
      },
    );
  });
  let failed: unknown;
  // The window ends with `during` (autocannon is stopped then), and
  // `during` is always awaited, so nothing of it runs into the next window.
  const during =
    options.during === undefined
      ? Promise.resolve()
      : options
          .during()
          .catch((err: unknown) => {
            failed = err;
          })
          .finally(() => {
            instance?.stop();
          });
  const [result] = await Promise.all([finished, during]);
  if (failed !== undefined)
    throw failed instanceof Error ? failed : new Error(JSON.stringify(failed));
  const seconds = (performance.now() - started) / 1000;
  const node1 = processCpuMicros(options.serverPid);
  const pg1 = treeCpuMicros(options.postmasterPid);
  const writes1 = processWrites(options.serverPid);
  const load = process.cpuUsage(load0);
  const requests = result.requests.total;
  const statuses: Record<string, number> = {};
  for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) {
    statuses[code] = (stat as { count: number }).count;
  }
  return {
    requests,
    seconds,
    rps: requests / seconds,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    statuses,
    nodeCpuUsPerRequest: requests === 0 ? 0 : (node1 - node0) / requests,
    pgCpuUsPerRequest: requests === 0 ? 0 : (pg1 - pg0) / requests,
    pgWritesPerRequest: requests === 0 ? 0 : (writes1 - writes0) / requests - 1,
    loadCpuUsPerRequest: requests === 0 ? 0 : (load.user + load.system) / requests,
  };
}

/** One answer of a burst. */
export interface BurstAnswer {
  readonly status: number;
  readonly replay: boolean;
  readonly body: string;
}

/**
 * Sends `count` copies of one request at once, each over its own socket, and
 * waits for every answer.
 *
 * @param url full URL.
 * @param request headers and body.
 * @param count copies.
 * @param agent a keep-alive agent with at least `count` sockets.
 * @returns the answers and the time from the first send to the last answer.
 */
export async function burst(
  url: string,
  request: LoadRequest,
  count: number,
  agent: http.Agent,
): Promise<{ answers: BurstAnswer[]; ms: number }> {
  const started = performance.now();
  const answers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<BurstAnswer>((resolve, reject) => {
          const req = http.request(
            url,
            { method: 'POST', agent, headers: request.headers },
            (res) => {
              const chunks: Buffer[] = [];
              res.on('data', (c: Buffer) => chunks.push(c));
              res.on('end', () => {
                resolve({
                  status: res.statusCode ?? 0,
                  replay: res.headers['idempotent-replay'] === 'true',
                  body: Buffer.concat(chunks).toString(),
                });
              });
              res.on('error', reject);
            },
          );
          req.on('error', reject);
          req.end(request.body ?? '');
        }),
    ),
  );
  return { answers, ms: performance.now() - started };
}
