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
import type {
  FastifyContextConfig,
  FastifyInstance,
  onRequestHookHandler,
  onSendAsyncHookHandler,
} from 'fastify';
import { KEY_LIFETIME_HEADER, keyLifetimeValue } from './answers.js';
import { checkKeyedRoute, routeLabel } from './checks.js';
import { FST_IDEMPOTENCY_ROUTE_NOT_GUARDED } from './errors.js';
import { keyedHooks } from './hooks.js';
import { resolveOptions, type IdempotencyEvent, type IdempotencyOptions } from './options.js';
import { BODY_BYTES, KEYED_STATE, keyedStateOf } from './request-state.js';
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
  interface FastifySchema {
    /**
     * The operation's id: a keyed route must declare one, stored as its
     * keys' action. Declared as @fastify/swagger declares it, so an app
     * without that plugin can write it.
     */
    operationId?: string;
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

/**
 * Set on the config of every route the plugin compiled. Fastify copies a
 * route's config (symbol keys included) into the config a request sees, so
 * the misorder guard can tell a compiled keyed route from one declared
 * before the plugin.
 */
const COMPILED: unique symbol = Symbol('idempotency.compiled');

type MarkedConfig = { readonly [COMPILED]?: true; readonly idempotent?: boolean | 'required' };

/**
 * The guard against a keyed route declared before the plugin. Fastify
 * gives a plugin no list of the routes declared before it (`onRoute` only
 * sees later ones, and `printRoutes` shows no route config), so it cannot
 * be refused at start-up. A lifecycle hook, however, reaches every route of
 * the plugin's context and of its children, earlier ones included, because
 * Fastify gives each route its hooks only when the server gets ready. So
 * such a route answers every request with a 500 naming the misorder, logged
 * the first time, and its handler never runs without a key's transaction.
 *
 * @returns an `onRequest` hook; it costs a route that is not keyed one
 *   property read.
 */
function misorderGuard(): onRequestHookHandler {
  const logged = new WeakSet<object>();
  return function idempotencyMisorderGuard(request, _reply, done) {
    const options = request.routeOptions;
    const config = options.config as MarkedConfig;
    const flag = config.idempotent;
    if ((flag !== true && flag !== 'required') || config[COMPILED] === true) {
      done();
      return;
    }
    const url = options.url ?? request.url;
    const err = new FST_IDEMPOTENCY_ROUTE_NOT_GUARDED(
      routeLabel({ method: request.method, url, schema: options.schema ?? {} }),
    );
    if (!logged.has(config)) {
      logged.add(config);
      request.log.error({ err, route: `${request.method} ${url}` }, err.message);
    }
    done(err);
  };
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
  app.decorateRequest(KEYED_STATE, null);
  app.decorateRequest(BODY_BYTES, null);
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
    if (keyedStateOf(req) !== null) reply.header(KEY_LIFETIME_HEADER, lifetime);
    return Promise.resolve(payload);
  };

  app.addHook('onRequest', misorderGuard());

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
    routeOptions.config = {
      ...routeOptions.config,
      [COMPILED]: true,
    } as FastifyContextConfig;
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
