/**
 * The options a test's HTTP server (platform/http's `createHttpServer`)
 * takes when the test does not care about them: a silent logger, a 4 KiB
 * body limit, a ready database, a fixed clock, a rate limit no test reaches,
 * in-memory metrics and an authenticator that knows no token. A test names
 * only what it exercises, on top.
 */
import { ManualClock } from '../../kernel/clock/index.js';
import { InMemoryMetrics } from '../../kernel/metrics/index.js';
import { createLogger } from '../../platform/log/index.js';
import type { HttpServerOptions } from '../../platform/http/server.js';

/**
 * Options for `createHttpServer` with every field a quiet default.
 *
 * @param overrides - the fields the test sets itself; each replaces the default.
 * @returns a fresh options object (a new clock and metrics on every call).
 */
export function testServerOptions(overrides: Partial<HttpServerOptions> = {}): HttpServerOptions {
  return {
    logger: createLogger({ appName: 'svc', level: 'silent' }),
    bodyLimit: 4096,
    readiness: () => Promise.resolve(),
    appName: 'svc',
    apiVersion: '1',
    authenticator: { authenticate: () => Promise.resolve(null) },
    clock: new ManualClock('2026-03-01T12:00:00Z'),
    rateLimit: { max: 10_000, windowMs: 60_000 },
    metrics: new InMemoryMetrics(),
    ...overrides,
  };
}
