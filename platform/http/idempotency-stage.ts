/**
 * The idempotency stage of this server: the plugin registered with this
 * application's rules (keys belong to the principal of the request
 * context; thrown errors mapped by the error handler's own function; the
 * plugin's events as this server's metrics).
 */
import type { FastifyInstance } from 'fastify';
import { isPrincipal } from '../../kernel/actor/index.js';
import type { Clock } from '../../kernel/clock/index.js';
import { currentContext } from '../../kernel/context/index.js';
import type { IdempotencyStore } from '../../kernel/idempotency/index.js';
import type { Metrics } from '../../kernel/metrics/index.js';
import type { UnitOfWork } from '../../kernel/txn/index.js';
import { idempotencyPlugin, type IdempotencyEvent } from './idempotency/index.js';
import { toAppError } from './problems.js';

/** The idempotency stage of this server: where keys live and how long. */
export interface IdempotencyStage {
  /** Where keys and answers live (module sync's PgIdempotencyStore). */
  readonly store: IdempotencyStore;
  /** The unit of work the handlers' use cases join. */
  readonly uow: UnitOfWork;
  /** Key time to live (`sync.idempotency_key_ttl`), in ms. */
  readonly ttlMs: number;
  /**
   * How long a repeat waits for a first request under the same key
   * (`database.lock_timeout`), in ms.
   */
  readonly waitMs: number;
}

/**
 * The idempotency plugin's events as this server's metrics: keyed requests
 * by route and outcome, the time spent waiting for a key, and how many
 * requests wait in memory now.
 *
 * @param metrics the server's metrics.
 * @returns the plugin's `onEvent` option.
 */
function idempotencyMetrics(metrics: Metrics): (event: IdempotencyEvent) => void {
  const outcomes = metrics.counter(
    'idempotency_requests_total',
    'Keyed requests by route and outcome.',
    ['route', 'outcome'],
  );
  const waits = metrics.histogram(
    'idempotency_key_wait_seconds',
    'Time spent taking an idempotency key (waiting on a concurrent first request included).',
    ['route'],
  );
  const localWaiters = metrics.gauge(
    'idempotency_local_waiters',
    'Keyed requests waiting in memory for a first request under the same key in this process.',
    [],
  );
  return (event) => {
    switch (event.type) {
      case 'outcome':
        outcomes.inc({ route: event.route, outcome: event.outcome });
        break;
      case 'key_wait':
        waits.observe({ route: event.route }, event.seconds);
        break;
      case 'local_waiters':
        localWaiters.set({}, event.count);
        break;
    }
  };
}

/**
 * Registers the idempotency plugin on the server.
 *
 * @param app the server, before its routes.
 * @param stage store, unit of work, TTL and wait.
 * @param deps the kernel clock and the server's metrics.
 */
export async function registerIdempotency(
  app: FastifyInstance,
  stage: IdempotencyStage,
  deps: { readonly clock: Clock; readonly metrics: Metrics },
): Promise<void> {
  await app.register(idempotencyPlugin, {
    store: stage.store,
    transaction: stage.uow,
    ttl: stage.ttlMs,
    wait: stage.waitMs,
    clock: deps.clock,
    // Keys belong to principals: an anonymous caller's key has no effect.
    scope: () => {
      const actor = currentContext()?.actor;
      return actor !== undefined && isPrincipal(actor) ? actor.principalId : null;
    },
    toProblem: toAppError,
    onEvent: idempotencyMetrics(deps.metrics),
  });
}
