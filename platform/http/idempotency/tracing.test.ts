/**
 * The plugin's spans, read from a real OpenTelemetry SDK (in-memory
 * exporter, AsyncLocalStorage context manager) over bare Fastify with the
 * in-memory store and unit of work: the span tree of a fresh keyed request,
 * its replay from memory, a duplicate that waited and replayed from the
 * row, a 409 after the lock timeout, and a retry; and how a span records
 * an error. No span or attribute carries the key, a body or an error's
 * message.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { SpanStatusCode, trace } from '@opentelemetry/api';
import { newId } from '../../../kernel/ids/index.js';
import { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
import {
  InMemoryUnitOfWork,
  type InMemoryUnitOfWorkOptions,
} from '../../../kernel/txn/in-memory.js';
import { recordSpans, type SpanNode } from '../../../test/harness/tracing.js';
import { errorType } from '../../../kernel/errs/index.js';
import idempotency from './index.js';
import {
  activeContext,
  ATTRIBUTES,
  inSpan,
  inSpanSync,
  SPANS,
  startSpan,
  TRACER_NAME,
} from './tracing.js';

const recorder = recordSpans(t);

/** The attributes the trees below compare. */
const KEYS = [
  ATTRIBUTES.outcome,
  ATTRIBUTES.operation,
  ATTRIBUTES.route,
  ATTRIBUTES.status,
  ATTRIBUTES.keyWaitResult,
  ATTRIBUTES.keyWaitWaited,
  ATTRIBUTES.attemptNumber,
  ATTRIBUTES.attemptResult,
  ATTRIBUTES.commitResult,
  ATTRIBUTES.replaySource,
  ATTRIBUTES.errorType,
  ATTRIBUTES.sqlState,
];

const ROUTE = { [ATTRIBUTES.operation]: 'createThing', [ATTRIBUTES.route]: '/things' };

interface Kit {
  readonly app: FastifyInstance;
  readonly store: InMemoryIdempotencyStore;
  readonly uow: InMemoryUnitOfWork;
  readonly runs: { n: number };
}

/** An app with one keyed route whose handler may be held until `release`. */
async function kit(
  t: Test,
  options: {
    uow?: InMemoryUnitOfWorkOptions;
    shared?: Pick<Kit, 'store' | 'uow'>;
    hold?: Promise<unknown>;
    started?: () => void;
  } = {},
): Promise<Kit> {
  // Each test reads only its own spans.
  recorder.reset();
  const uow = options.shared?.uow ?? new InMemoryUnitOfWork(options.uow ?? { retryMax: 2 });
  const store = options.shared?.store ?? new InMemoryIdempotencyStore(uow, 100);
  const owner = 'principal-1';
  const runs = { n: 0 };
  const app = Fastify();
  t.teardown(() => app.close());
  await app.register(idempotency, { store, transaction: uow, scope: () => owner });
  app.post(
    '/things',
    { config: { idempotent: true }, schema: { operationId: 'createThing' } },
    async (_req, reply) => {
      runs.n++;
      options.started?.();
      if (options.hold !== undefined) await options.hold;
      reply.code(201);
      return { id: newId(), secret: 'not in a span' };
    },
  );
  await app.ready();
  return { app, store, uow, runs };
}

function send(app: FastifyInstance, key: string, payload = '{"name":"a"}') {
  return app.inject({
    method: 'POST',
    url: '/things',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    payload,
  });
}

/** The plugin's spans only, as trees, once `requests` keyed requests' spans have ended. */
async function ours(requests = 1): Promise<SpanNode[]> {
  await recorder.ended(SPANS.request, requests);
  return recorder.trees(KEYS, ['idempotency']);
}

function node(
  name: string,
  attributes: Record<string, unknown>,
  children: SpanNode[] = [],
): SpanNode {
  return { name, attributes, children };
}

const waited = (turnWaited: boolean): SpanNode =>
  node(SPANS.keyWait, {
    [ATTRIBUTES.keyWaitResult]: 'turn',
    [ATTRIBUTES.keyWaitWaited]: turnWaited,
  });

void t.test('a fresh key: its wait, one attempt, the commit', async (t) => {
  const k = await kit(t);
  const res = await send(k.app, newId());
  t.equal(res.statusCode, 201);
  t.same(await ours(), [
    node(SPANS.request, { ...ROUTE, [ATTRIBUTES.outcome]: 'stored', [ATTRIBUTES.status]: 201 }, [
      waited(false),
      node(SPANS.attempt, { [ATTRIBUTES.attemptNumber]: 1, [ATTRIBUTES.attemptResult]: 'stored' }),
      node(SPANS.commit, { [ATTRIBUTES.commitResult]: 'committed' }),
    ]),
  ]);
  const spans = recorder.spans();
  t.ok(
    spans.every((s) => s.instrumentationScope.name === TRACER_NAME),
    'every span is the plugin tracer',
  );
  const text = JSON.stringify(spans.map((s) => s.attributes));
  t.notMatch(text, /principal-1|not in a span/, 'neither the owner nor the body in an attribute');
});

void t.test('a repeat: the replay from memory, nothing else', async (t) => {
  const k = await kit(t);
  const key = newId();
  const first = await send(k.app, key);
  await recorder.ended(SPANS.request, 1);
  recorder.reset();
  const again = await send(k.app, key);
  t.equal(again.headers['idempotent-replay'], 'true');
  t.equal(again.body, first.body);
  t.same(await ours(), [
    node(SPANS.request, { ...ROUTE, [ATTRIBUTES.outcome]: 'replayed', [ATTRIBUTES.status]: 201 }, [
      node(SPANS.replay, { [ATTRIBUTES.replaySource]: 'memory' }),
    ]),
  ]);
  await recorder.ended(SPANS.request, 1);
  recorder.reset();
  const other = await send(k.app, key, '{"name":"b"}');
  t.equal(other.statusCode, 422);
  t.same(await ours(), [
    node(SPANS.request, { ...ROUTE, [ATTRIBUTES.outcome]: 'reused', [ATTRIBUTES.status]: 422 }),
  ]);
  const key422 = JSON.stringify(recorder.spans().map((s) => s.attributes));
  t.notMatch(key422, new RegExp(key), 'the key is in no attribute');
});

void t.test(
  'a duplicate that waited for the turn: its wait, an attempt that met the row, the replay',
  async (t) => {
    const { promise: hold, resolve: release } = Promise.withResolvers<undefined>();
    const { promise: started, resolve: start } = Promise.withResolvers<undefined>();
    const k = await kit(t, {
      hold,
      started: () => {
        start(undefined);
      },
    });
    const key = newId();
    const first = send(k.app, key);
    await started;
    const duplicate = send(k.app, key);
    await new Promise((r) => setTimeout(r, 30));
    release(undefined);
    const [a, b] = await Promise.all([first, duplicate]);
    t.equal(a.statusCode, 201);
    t.equal(b.headers['idempotent-replay'], 'true');
    t.equal(k.runs.n, 1, 'one effect');
    const trees = await ours(2);
    t.equal(trees.length, 2);
    t.same(trees[1], {
      name: SPANS.request,
      attributes: { ...ROUTE, [ATTRIBUTES.outcome]: 'replayed', [ATTRIBUTES.status]: 201 },
      children: [
        waited(true),
        node(SPANS.attempt, {
          [ATTRIBUTES.attemptNumber]: 1,
          [ATTRIBUTES.attemptResult]: 'existing',
        }),
        node(SPANS.replay, { [ATTRIBUTES.replaySource]: 'row' }),
      ],
    });
  },
);

void t.test('a duplicate in another process: the lock timeout ends its attempt, 409', async (t) => {
  const { promise: hold, resolve: release } = Promise.withResolvers<undefined>();
  const { promise: started, resolve: start } = Promise.withResolvers<undefined>();
  const one = await kit(t, {
    uow: { retryMax: 0 },
    hold,
    started: () => {
      start(undefined);
    },
  });
  // The same store and unit of work: one database, a second process.
  const two = await kit(t, { shared: one });
  const key = newId();
  const first = send(one.app, key);
  await started;
  recorder.reset();
  const duplicate = await send(two.app, key);
  t.equal(duplicate.statusCode, 409);
  t.same(await ours(), [
    node(
      SPANS.request,
      { ...ROUTE, [ATTRIBUTES.outcome]: 'in_progress', [ATTRIBUTES.status]: 409 },
      [
        waited(false),
        node(SPANS.attempt, {
          [ATTRIBUTES.attemptNumber]: 1,
          [ATTRIBUTES.attemptResult]: 'in_progress',
          [ATTRIBUTES.errorType]: 'RequestInProgressError',
        }),
      ],
    ),
  ]);
  release(undefined);
  t.equal((await first).statusCode, 201);
});

void t.test(
  'a retry: the attempt that failed with its SQLSTATE, the next one, one commit',
  async (t) => {
    const serialization = Object.assign(new Error('could not serialize'), { code: '40001' });
    const k = await kit(t, {
      uow: { retryMax: 2, faultHook: ({ attempt }) => (attempt === 1 ? serialization : undefined) },
    });
    const res = await send(k.app, newId());
    t.equal(res.statusCode, 201);
    t.equal(k.runs.n, 2, 'the handler ran twice');
    t.same(await ours(), [
      node(SPANS.request, { ...ROUTE, [ATTRIBUTES.outcome]: 'stored', [ATTRIBUTES.status]: 201 }, [
        waited(false),
        node(SPANS.attempt, {
          [ATTRIBUTES.attemptNumber]: 1,
          [ATTRIBUTES.attemptResult]: 'stored',
        }),
        node(SPANS.commit, {
          [ATTRIBUTES.commitResult]: 'retryable',
          [ATTRIBUTES.errorType]: '40001',
          [ATTRIBUTES.sqlState]: '40001',
        }),
        node(SPANS.attempt, {
          [ATTRIBUTES.attemptNumber]: 2,
          [ATTRIBUTES.attemptResult]: 'stored',
        }),
        node(SPANS.commit, { [ATTRIBUTES.commitResult]: 'committed' }),
      ]),
    ]);
  },
);

void t.test('the spans are children of the span active when the request came', async (t) => {
  const k = await kit(t);
  const outer = trace.getTracer('the application');
  await outer.startActiveSpan('http request', async (span) => {
    await send(k.app, newId());
    span.end();
  });
  await recorder.ended(SPANS.request, 1);
  const trees = recorder.trees([], ['http request', 'idempotency']);
  t.equal(trees.length, 1);
  t.equal(trees[0]?.name, 'http request');
  t.same(
    trees[0]?.children.map((c) => c.name),
    [SPANS.request],
  );
});

void t.test('a span that ends in an error says its type, never its message', async (t) => {
  recorder.reset();
  const secretMessage = 'duplicate key value (owner)=(principal-1)';
  const unique = Object.assign(new Error(secretMessage), { code: '23505' });
  await t.rejects(
    inSpan('async', {}, () => Promise.reject(unique)),
    unique,
  );
  t.throws(() =>
    inSpanSync('sync', {}, () => {
      throw new TypeError(secretMessage);
    }),
  );
  const end = startSpan('begun', activeContext());
  end({ [ATTRIBUTES.commitResult]: 'failed' }, { name: '' });
  end({ [ATTRIBUTES.commitResult]: 'committed' });
  const spans = recorder.spans();
  t.same(
    spans.map((s) => [s.name, s.attributes[ATTRIBUTES.errorType], s.status]),
    [
      ['async', '23505', { code: SpanStatusCode.ERROR, message: '23505' }],
      ['sync', 'TypeError', { code: SpanStatusCode.ERROR, message: 'TypeError' }],
      ['begun', '_OTHER', { code: SpanStatusCode.ERROR, message: '_OTHER' }],
    ],
  );
  t.equal(spans[0]?.attributes[ATTRIBUTES.sqlState], '23505');
  t.equal(spans[1]?.attributes[ATTRIBUTES.sqlState], undefined, 'no SQLSTATE without one');
  t.equal(spans[2]?.attributes[ATTRIBUTES.commitResult], 'failed', 'a second end does nothing');
  t.notMatch(JSON.stringify(spans.map((s) => [s.attributes, s.status])), /principal-1/);
  t.equal(errorType(null), '_OTHER');
  t.equal(errorType({ code: 'not a sqlstate', name: 'Named' }), 'Named');
  t.equal(errorType({ code: 'EBADF', name: 'Error' }), 'Error', 'a Node.js code is no SQLSTATE');
  t.equal(errorType({ code: 'P0001' }), 'P0001');
  t.equal(errorType({ code: 'XX000' }), 'XX000');
});

void t.test(
  'an error whose code cannot be read ends its span and is the one rethrown',
  async (t) => {
    recorder.reset();
    const hostile = new Proxy(new Error('hostile'), {
      get() {
        throw new Error('the trap');
      },
    });
    // tap's own assertions would read the Proxy, and so would resolving a
    // promise with it (its `then`): the thrown value is caught here, boxed,
    // and compared by identity.
    const caught = async (fn: () => unknown): Promise<{ err: unknown }> => {
      try {
        await fn();
      } catch (err) {
        return { err };
      }
      return { err: 'nothing thrown' };
    };
    t.ok(
      (await caught(() => inSpan('async', {}, () => Promise.reject(hostile)))).err === hostile,
      'the thrown value, not the trap error',
    );
    t.ok(
      (
        await caught(() =>
          inSpanSync('sync', {}, () => {
            throw hostile;
          }),
        )
      ).err === hostile,
      'the thrown value, not the trap error, from a synchronous span',
    );
    startSpan('begun', activeContext())({}, hostile);
    t.same(
      recorder.spans().map((s) => [s.name, s.attributes[ATTRIBUTES.errorType], s.status.code]),
      [
        ['async', '_OTHER', SpanStatusCode.ERROR],
        ['sync', '_OTHER', SpanStatusCode.ERROR],
        ['begun', '_OTHER', SpanStatusCode.ERROR],
      ],
    );
  },
);
