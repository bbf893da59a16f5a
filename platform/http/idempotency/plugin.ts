/**
 * The idempotency plugin: a route that declares `config.idempotent` and gets
 * an `Idempotency-Key` from a caller with an owner (`scope`) takes effect
 * exactly once, because the key row and the request's effect commit in one
 * transaction.
 *
 * Registered as official plugins are, before the routes it guards:
 *
 * ```ts
 * await app.register(idempotency, { store, transaction, scope: (req) => ownerOf(req) });
 * app.post('/things', { config: { idempotent: true }, schema: { operationId: 'createThing' } }, handler);
 * ```
 *
 * Each keyed route is checked and compiled once, in `onRoute` (routes that
 * are not keyed pay nothing): see hooks.ts for what runs per request and
 * attempt.ts for the transaction. README.md in this folder documents the
 * options, the route config, the handler contract, errors and outcomes.
 */
import fp from 'fastify-plugin';
import type { FastifyInstance, onSendAsyncHookHandler } from 'fastify';
import { KEY_LIFETIME_HEADER, keyLifetimeValue } from './answers.js';
import { checkKeyedRoute } from './checks.js';
import { keyedHooks } from './hooks.js';
import { resolveOptions, type IdempotencyEvent, type IdempotencyOptions } from './options.js';
import { SingleFlight } from './single-flight.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Idempotency keys: `true` honours an `Idempotency-Key` header,
     * `'required'` demands one (a missing key is a 400), `false` states the
     * route is not keyed.
     */
    idempotent?: boolean | 'required';
    /** The route's 2xx answers carry a one-time secret: never stored. */
    oneTimeSecret?: boolean;
    /** Template such as `/api/v1/accounts/{id}` to rebuild `Location` on replay. */
    location?: string;
    /**
     * Every answer of the route carries `Idempotency-Key-Lifetime`, as
     * every answer of a keyed request does: for a route a client asks
     * before its first keyed write (who am I, what does the server keep).
     */
    announceKeyLifetime?: boolean;
  }
  interface FastifyInstance {
    /** Added by the idempotency plugin. */
    idempotency: IdempotencyDecorator;
  }
}

/** What the plugin decorates the instance with. */
export interface IdempotencyDecorator {
  /**
   * Whether the plugin guards a route: for an application's own start-up
   * checks (a keyed route registered before the plugin is not guarded).
   *
   * @param method the HTTP method, upper case.
   * @param url the route's URL as declared.
   */
  guards(method: string, url: string): boolean;
}

function toArray<T>(v: T | T[] | undefined): T[] {
  if (v === undefined) return [];
  return Array.isArray(v) ? v : [v];
}

async function idempotency(app: FastifyInstance, opts: IdempotencyOptions): Promise<void> {
  const resolved = resolveOptions(opts);
  // An observer that throws must not break a request or hold a key: what it
  // throws is logged and dropped.
  const options = {
    ...resolved,
    onEvent: (event: IdempotencyEvent) => {
      try {
        resolved.onEvent(event);
      } catch (err) {
        app.log.error({ err, event: event.type }, 'the idempotency onEvent option threw');
      }
    },
  };
  const flights = new SingleFlight((count) => {
    options.onEvent({ type: 'local_waiters', count });
  });
  app.decorateRequest('idempotencyState', null);
  app.decorateRequest('idempotencyBody', null);
  const guarded = new Set<string>();
  app.decorate('idempotency', {
    guards: (method: string, url: string) => guarded.has(`${method} ${url}`),
  } satisfies IdempotencyDecorator);

  const lifetime = keyLifetimeValue(options.ttlMs);
  // On the answer as it leaves, whatever wrote it (a replay, the stored
  // answer, a problem of the error handler), so no keyed answer lacks it.
  const announce: onSendAsyncHookHandler = async (_req, reply, payload) => {
    reply.header(KEY_LIFETIME_HEADER, lifetime);
    return Promise.resolve(payload);
  };
  const announceKeyed: onSendAsyncHookHandler = async (req, reply, payload) => {
    if (req.idempotencyState !== null) reply.header(KEY_LIFETIME_HEADER, lifetime);
    return Promise.resolve(payload);
  };

  app.addHook('onRoute', (routeOptions) => {
    const flag = routeOptions.config?.idempotent;
    if (routeOptions.config?.announceKeyLifetime === true) {
      routeOptions.onSend = [...toArray(routeOptions.onSend), announce];
    } else if (flag === true || flag === 'required') {
      routeOptions.onSend = [...toArray(routeOptions.onSend), announceKeyed];
    }
    if (flag !== true && flag !== 'required') return;
    const route = checkKeyedRoute(routeOptions);
    const hooks = keyedHooks(options, flights, route);
    // A schema failure is decided inside the attempt, after an existing row
    // has had its say (a replay runs no validation).
    routeOptions.attachValidation = true;
    routeOptions.preParsing = [...toArray(routeOptions.preParsing), hooks.preParsing];
    routeOptions.preValidation = [...toArray(routeOptions.preValidation), hooks.preValidation];
    routeOptions.handler = hooks.wrap(routeOptions.handler);
    for (const m of toArray(routeOptions.method)) guarded.add(`${m} ${routeOptions.url}`);
  });
  await Promise.resolve();
}

/**
 * The idempotency plugin, wrapped with fastify-plugin so its hooks apply to
 * the routes of the whole server. Register it before the routes it guards.
 */
export const idempotencyPlugin = fp(idempotency, {
  name: 'idempotency',
  fastify: '5.x',
});
