/**
 * The plugin's errors, made with @fastify/error as official plugins make
 * theirs: each has a stable `code` to switch on and a message that names what
 * is wrong.
 */
import createError from '@fastify/error';

/**
 * An option given to the plugin is missing or invalid: thrown by
 * `app.register`, naming the option.
 * Arguments: the option's name, what is wrong with it.
 */
export const FST_IDEMPOTENCY_INVALID_OPTION = createError<[string, string]>(
  'FST_IDEMPOTENCY_INVALID_OPTION',
  'idempotency option "%s": %s',
  500,
  TypeError,
);

/**
 * A keyed route the plugin cannot honour, refused when it is declared (so
 * at start-up), naming its method, URL and operationId.
 * Arguments: the route's label, why.
 */
export const FST_IDEMPOTENCY_ROUTE_REFUSED = createError<[string, string]>(
  'FST_IDEMPOTENCY_ROUTE_REFUSED',
  'Idempotency-Key route %s: %s',
  500,
);

/**
 * A keyed handler broke its contract (it called `reply.send` or
 * `reply.hijack`, or returned a Buffer or a stream): the request fails with
 * a 500 and nothing is stored.
 * Argument: what it did.
 */
export const FST_IDEMPOTENCY_HANDLER_CONTRACT = createError<[string]>(
  'FST_IDEMPOTENCY_HANDLER_CONTRACT',
  'a keyed handler must return %s',
  500,
);

/**
 * A route declares `config.idempotent` but was declared before the plugin
 * was registered, so the plugin never compiled it: every request of it
 * fails with a 500 instead of running unguarded (Fastify lists no routes
 * declared earlier, so this cannot be refused at start-up).
 * Argument: the route's label (method, URL, operationId).
 */
export const FST_IDEMPOTENCY_ROUTE_NOT_GUARDED = createError<[string]>(
  'FST_IDEMPOTENCY_ROUTE_NOT_GUARDED',
  'Idempotency-Key route %s was declared before the idempotency plugin was registered, so the plugin does not guard it: register the plugin before the routes it guards',
  500,
);

/**
 * A keyed request arrived inside a unit of work the application had
 * already opened (a request injected from inside `uow.run`, say): the
 * key's row would join a transaction the plugin does not commit, so it
 * could not tell the client what was stored. The request fails with a 500
 * and nothing runs.
 * Argument: the route's label.
 */
export const FST_IDEMPOTENCY_AMBIENT_TRANSACTION = createError<[string]>(
  'FST_IDEMPOTENCY_AMBIENT_TRANSACTION',
  'Idempotency-Key route %s was called inside a unit of work that was already open: a keyed request must open its own transaction, in which the key row and the effect commit together',
  500,
);
