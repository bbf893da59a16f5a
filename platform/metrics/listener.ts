/**
 * The worker role's metrics listener: a plain node:http server that answers
 * one path with a scrape and everything else with 404. The worker has no HTTP
 * API, so it gets no Fastify instance, only this.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Exposition } from './prometheus.js';

/** Options of {@link startMetricsListener}. */
export interface MetricsListenerOptions {
  /** Address to bind (`http.host`). */
  readonly host: string;
  /** TCP port (`metrics.port`); 0 lets the operating system pick one. */
  readonly port: number;
  /** The one path served (`metrics.path`). */
  readonly path: string;
  /** Renders a scrape. */
  readonly exposition: () => Promise<Exposition>;
  /** Told when rendering fails (the scraper gets a 500). */
  readonly onError: (err: unknown) => void;
}

/** A listening metrics listener. */
export interface MetricsListener {
  /** Where it listens, e.g. `http://127.0.0.1:9464`. */
  readonly address: string;
  /** The bound port (the one picked when 0 was asked for). */
  readonly port: number;
  /** Stops listening and closes open connections. Safe to call twice. */
  close(): Promise<void>;
}

/**
 * Starts the listener.
 *
 * @param options address, port, path and what to serve.
 * @returns the listener once it is bound.
 * @throws Error from the socket when the address cannot be bound (e.g. EADDRINUSE).
 */
export async function startMetricsListener(
  options: MetricsListenerOptions,
): Promise<MetricsListener> {
  const server = createServer((req, res) => {
    void answer(options, req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: options.host, port: options.port }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // After listening, a failed accept (EMFILE and the like) must not become an
  // unhandled 'error' event that takes the process down.
  server.on('error', (err) => {
    options.onError(err);
  });
  const bound = server.address() as AddressInfo;
  const host = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
  let closing: Promise<void> | undefined;
  return {
    address: `http://${host}:${String(bound.port)}`,
    port: bound.port,
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
        // Scrapers keep connections alive; a scrape in flight is not worth waiting for.
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

async function answer(
  options: MetricsListenerOptions,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const path = (req.url ?? '/').split('?', 1)[0];
  if (path !== options.path) {
    plain(res, 404, 'not found\n');
    return;
  }
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('allow', 'GET, HEAD');
    plain(res, 405, 'method not allowed\n');
    return;
  }
  try {
    const { contentType, body } = await options.exposition();
    res.writeHead(200, {
      'content-type': contentType,
      'content-length': Buffer.byteLength(body),
      'cache-control': 'no-store',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  } catch (err) {
    options.onError(err);
    plain(res, 500, 'metrics unavailable\n');
  }
}

function plain(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
  res.end(text);
}
