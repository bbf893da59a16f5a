/**
 * Application rules about routes, applied by the server's composition (not
 * by the idempotency plugin, which any application may register with rules
 * of its own):
 * - every POST, PUT, PATCH and DELETE route states `config.idempotent`
 *   (`true`, `'required'` or an explicit `false`), so no write is forgotten;
 * - a keyed route is never `config.auth: 'none'`: its keys belong to the
 *   principal of the request, and a public route has none;
 * - every keyed route is guarded by the plugin, i.e. was declared after it.
 *
 * The first two are checked as each route is declared, the last once the
 * server is ready; each refusal stops start-up naming the route.
 */
import type { FastifyInstance, RouteOptions } from 'fastify';
import { routeLabel } from './idempotency/index.js';

/** A route that breaks the application's rules. */
export class RoutePolicyError extends Error {
  override readonly name = 'RoutePolicyError';
}

const WRITE_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

function methodsOf(route: Pick<RouteOptions, 'method'>): string[] {
  return Array.isArray(route.method) ? route.method : [route.method];
}

/**
 * Registers the rules on a server before any route is declared.
 *
 * @param app the server.
 * @param options `keyed`: whether the idempotency plugin is registered (a
 *   keyed route must then be guarded by it; without the plugin the server
 *   has no keyed routes, and a route still states `idempotent`).
 * @throws RoutePolicyError from `onRoute` or `ready()`, naming the route.
 */
export function writeRoutePolicy(app: FastifyInstance, options: { readonly keyed: boolean }): void {
  const declared: RouteOptions[] = [];
  app.addHook('onRoute', (route) => {
    const flag = route.config?.idempotent;
    if (flag === undefined && methodsOf(route).some((m) => WRITE_METHODS.has(m))) {
      throw new RoutePolicyError(
        `${routeLabel(route)} must state config.idempotent (true, 'required' or false)`,
      );
    }
    if (flag !== true && flag !== 'required') return;
    if (route.config?.auth === 'none') {
      throw new RoutePolicyError(
        `${routeLabel(route)} is keyed, so it may not be auth: none (keys belong to principals)`,
      );
    }
    declared.push(route);
  });
  if (!options.keyed) return;
  app.addHook('onReady', async () => {
    for (const route of declared) {
      if (methodsOf(route).some((m) => !app.idempotency.guards(m, route.url))) {
        throw new RoutePolicyError(
          `${routeLabel(route)} is keyed but was registered before the idempotency plugin`,
        );
      }
    }
    await Promise.resolve();
  });
}
