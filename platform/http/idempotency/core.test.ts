/**
 * The plugin's core without Fastify: option validation, the in-process
 * queue of duplicates, what a stored row answers, and the attempt's state
 * machine over the in-memory store and unit of work (the PostgreSQL ones run
 * in test/idempotency*.test.ts and test/idempotency-plugin-bare.test.ts).
 */
import t from 'tap';
import { problem } from '../../../kernel/errs/index.js';
import { newId } from '../../../kernel/ids/index.js';
import { InMemoryIdempotencyStore } from '../../../kernel/idempotency/in-memory.js';
import type { IdempotencyEntry } from '../../../kernel/idempotency/index.js';
import { InMemoryUnitOfWork } from '../../../kernel/txn/in-memory.js';
import { answerFromEntry } from './answers.js';
import { runAttempt, type AttemptInput } from './attempt.js';
import { captureProblem, type Captured } from './capture.js';
import { DEFAULTS, defaultToProblem, resolveOptions } from './options.js';
import { SingleFlight } from './single-flight.js';

const uow = new InMemoryUnitOfWork();
const store = new InMemoryIdempotencyStore(uow);
const scope = () => null;

void t.test('options: required ones are named, defaults applied, bad values refused', (t) => {
  t.throws(() => resolveOptions(undefined), {
    code: 'FST_IDEMPOTENCY_INVALID_OPTION',
    message: /"options": must be an object/,
  });
  t.throws(() => resolveOptions({ transaction: uow, scope }), /"store": is required/);
  t.throws(() => resolveOptions({ store, scope }), /"transaction": is required/);
  t.throws(() => resolveOptions({ store, transaction: uow }), /"scope": is required/);
  const resolved = resolveOptions({ store, transaction: uow, scope });
  t.equal(resolved.ttlMs, DEFAULTS.ttl, 'ttl defaults to 24 hours');
  t.equal(resolved.waitMs, DEFAULTS.wait, 'wait defaults to 5 seconds');
  t.ok(resolved.clock.now() instanceof Date, 'the system clock');
  t.equal(resolved.toProblem, defaultToProblem);
  for (const [name, value] of [
    ['ttl', 0],
    ['ttl', 1.5],
    ['ttl', '24h'],
    ['wait', -1],
    ['wait', Number.POSITIVE_INFINITY],
  ] as const) {
    t.throws(
      () => resolveOptions({ store, transaction: uow, scope, [name]: value }),
      new RegExp(`"${name}": must be a whole number of milliseconds`),
      `${name} = ${String(value)}`,
    );
  }
  t.throws(
    () => resolveOptions({ store, transaction: uow, scope, clock: {} }),
    /"clock": must have a now\(\)/,
  );
  t.throws(
    () => resolveOptions({ store, transaction: uow, scope, onEvent: 1 }),
    /"onEvent": must be a function, got number/,
  );
  t.throws(
    () => resolveOptions({ store, transaction: uow, scope, toProblem: 'x' }),
    /"toProblem": must be a function/,
  );
  t.throws(
    () => resolveOptions({ store, uow, scope, ttlMs: 1 }),
    /"uow": is not an option of this plugin/,
    'an unknown (or old) option name is refused, not ignored',
  );
  t.doesNotThrow(
    () => resolveOptions({ store, transaction: uow, scope, prefix: '/v1', logLevel: 'info' }),
    "Fastify's own register options pass",
  );
  t.throws(
    () => resolveOptions({ store, transaction: uow, scope, wait: 2 ** 31 }),
    /"wait": must be a whole number of milliseconds from 1 to 2147483647/,
    'a wait no timer can hold',
  );
  const known = problem('not_found', 'No.');
  t.equal(defaultToProblem(known), known, 'an AppError as it is');
  t.equal(defaultToProblem(new Error('boom')).status, 500, 'anything else a 500');
  const invalid = defaultToProblem(
    Object.assign(new Error('body/name must be string'), {
      statusCode: 400,
      validationContext: 'body',
      validation: [{ instancePath: '/name', keyword: 'type' }],
    }),
  );
  t.equal(invalid.code, 'validation_failed', "Fastify's validation error is a 400");
  t.same(invalid.errors, [{ pointer: '#body/name', code: 'type' }]);
  t.equal(defaultToProblem(Object.assign(new Error('x'), { statusCode: 404 })).code, 'not_found');
  t.equal(defaultToProblem(Object.assign(new Error('x'), { statusCode: 409 })).code, 'conflict');
  t.equal(defaultToProblem(Object.assign(new Error('x'), { statusCode: 418 })).status, 500);
  t.end();
});

void t.test(
  'single flight: one holder per key, waiters in turn, a budget that runs out',
  async (t) => {
    const counts: number[] = [];
    const flights = new SingleFlight((n) => counts.push(n));
    const first = await flights.acquire('k', 1000);
    t.equal(first.waited, false);
    t.equal(first.waitedSeconds, 0);
    const other = await flights.acquire('other', 1000);
    t.ok(other.turn, 'another key does not wait');
    other.turn?.release();
    const second = flights.acquire('k', 1000);
    const third = flights.acquire('k', 1000);
    await new Promise((r) => setTimeout(r, 20));
    t.equal(flights.waiting, 2, 'two wait behind the holder');
    first.turn?.release();
    const got = await Promise.race([second, third]);
    t.ok(got.turn && got.waited && got.waitedSeconds > 0, 'the next one holds it, having waited');
    t.equal(flights.waiting, 1, 'one still waits: woken together, only one proceeds');
    got.turn?.release();
    const last = await (got === (await second) ? third : second);
    t.ok(last.turn);
    last.turn?.release();
    last.turn?.release();
    const holder = await flights.acquire('k', 1000);
    const late = await flights.acquire('k', 30);
    t.equal(late.turn, null, 'the budget ran out');
    t.ok(late.waited && late.waitedSeconds >= 0.025);
    holder.turn?.release();
    t.same(counts.slice(0, 1), [0], 'the gauge starts at 0');
    t.equal(counts.at(-1), 0, 'and ends at 0');
  },
);

const sha = (n: number) => new Uint8Array(32).fill(n);
const entry = (over: Partial<IdempotencyEntry>): IdempotencyEntry => ({
  status: 201,
  body: { id: 'x' },
  resourceId: null,
  sha256: sha(1),
  completed: true,
  ...over,
});

void t.test('a stored row answers: replay, reuse, one-time secret, in progress', (t) => {
  t.equal(answerFromEntry(entry({}), sha(1)).outcome, 'replayed');
  const reused = answerFromEntry(entry({}), sha(2));
  t.equal(reused.outcome, 'reused');
  t.equal(reused.outcome !== 'replayed' && reused.problem.code, 'idempotency_key_reuse');
  const secret = answerFromEntry(entry({ body: { one_time_secret: true } }), sha(1));
  t.equal(secret.outcome, 'secret_repeat');
  t.ok(
    secret.outcome !== 'replayed' && secret.replay && secret.problem.reason === 'one_time_secret',
  );
  const problemBody = answerFromEntry(
    entry({ status: 404, body: { one_time_secret: true } }),
    sha(1),
  );
  t.equal(problemBody.outcome, 'replayed', 'only a 2xx carries the secret marker');
  const running = answerFromEntry(entry({ completed: false }), sha(1));
  t.equal(running.outcome, 'in_progress');
  t.ok(running.outcome !== 'replayed' && running.problem.retryAfterSeconds === 1);
  t.end();
});

function attemptInput(
  u: InMemoryUnitOfWork,
  s: InMemoryIdempotencyStore,
  invoke: () => Promise<Captured>,
  over: Partial<AttemptInput> = {},
): AttemptInput {
  return {
    store: s,
    transaction: u,
    request: {
      principalId: newId(),
      key: newId(),
      action: 'a',
      sha256: sha(7),
      ttlMs: 60_000,
    },
    now: () => new Date('2026-03-01T12:00:00Z'),
    oneTimeSecret: false,
    prepare: () => undefined,
    invoke,
    onKeyWait: () => undefined,
    ...over,
  };
}

const answer = (status: number, body: unknown = { id: newId() }): Captured => ({
  status,
  body,
  code: undefined,
  headers: {},
});

void t.test('the attempt decides: stored, existing, not stored, final problem', async (t) => {
  const u = new InMemoryUnitOfWork();
  const s = new InMemoryIdempotencyStore(u);
  const effects: string[] = [];
  const effect = (what: string) =>
    u.run(() => {
      effects.push(what);
      u.current('effect').onRollback(() => effects.splice(effects.indexOf(what), 1));
      return Promise.resolve();
    });
  const waits: number[] = [];
  const input = attemptInput(
    u,
    s,
    async () => {
      await effect('created');
      return answer(201);
    },
    { onKeyWait: (seconds) => waits.push(seconds) },
  );
  const stored = await runAttempt(input, 'a');
  t.equal(stored.kind, 'stored');
  t.ok(stored.kind === 'stored' && stored.resourceId !== null, 'the id of the body is kept');
  t.same(effects, ['created']);
  t.equal(waits.length, 1, 'the key wait is reported once');
  const again = await runAttempt(
    { ...input, invoke: () => Promise.reject(new Error('must not run')) },
    'a',
  );
  t.equal(again.kind, 'existing', 'a second attempt on the key meets the row');
  t.ok(again.kind === 'existing' && again.entry.completed && again.entry.status === 201);

  const unauthorized = await runAttempt(
    attemptInput(u, s, async () => {
      await effect('undone');
      return captureProblem(problem('step_up_required', 'Again.'), 'c');
    }),
    'a',
  );
  t.equal(unauthorized.kind, 'not_stored', 'a 401 is not stored');
  t.notOk(effects.includes('undone'), 'and its effect rolled back');

  const conflictInput = attemptInput(u, s, async () => {
    await effect('half');
    return captureProblem(problem('conflict', 'Taken.'), 'c');
  });
  const conflict = await runAttempt(conflictInput, 'a');
  t.equal(conflict.kind, 'stored', 'a final 409 is stored');
  t.notOk(effects.includes('half'), 'after rolling back to the savepoint');
  const replay = await runAttempt(conflictInput, 'a');
  t.ok(replay.kind === 'existing' && replay.entry.status === 409);
});

void t.test('the attempt decides: commit failed, failed, in progress, retried', async (t) => {
  let failCommit = true;
  const u = new InMemoryUnitOfWork({
    retryMax: 2,
    commitHook: () => (failCommit ? new Error('commit refused') : undefined),
  });
  const s = new InMemoryIdempotencyStore(u, 50);
  const doomed = attemptInput(u, s, () => Promise.resolve(answer(201)));
  const commitFailed = await runAttempt(doomed, 'a');
  t.equal(commitFailed.kind, 'commit_failed');
  failCommit = false;
  t.equal(
    s.recall(doomed.request.principalId, doomed.request.key, doomed.now()),
    null,
    'nothing stored',
  );

  const broken = new InMemoryIdempotencyStore(u);
  broken.recall = () => {
    throw new Error('unused');
  };
  broken.take = () => Promise.reject(new Error('database gone'));
  const failed = await runAttempt(
    attemptInput(u, broken, () => Promise.resolve(answer(201))),
    'a',
  );
  t.ok(failed.kind === 'failed' && (failed.error as Error).message === 'database gone');

  // A first attempt holds the key in an open transaction: a second one waits
  // at the key (50 ms here) and answers in progress.
  const input = attemptInput(u, s, () => Promise.resolve(answer(201)));
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const entered = Promise.withResolvers<undefined>();
  const first = runAttempt(
    {
      ...input,
      invoke: async () => {
        entered.resolve(undefined);
        await held;
        return answer(201);
      },
    },
    'a',
  );
  await entered.promise;
  const second = await runAttempt(input, 'a');
  t.equal(second.kind, 'in_progress');
  release();
  t.equal((await first).kind, 'stored');

  let attempts = 0;
  let prepared = 0;
  const effects: number[] = [];
  const retried = await runAttempt(
    attemptInput(
      u,
      s,
      () => {
        attempts++;
        const mine = attempts;
        effects.push(mine);
        u.current('effect').onRollback(() => effects.splice(effects.indexOf(mine), 1));
        if (attempts === 1)
          return Promise.reject(Object.assign(new Error('deadlock'), { code: '40P01' }));
        return Promise.resolve(answer(201));
      },
      {
        prepare: () => {
          prepared++;
        },
      },
    ),
    'a',
  );
  t.equal(retried.kind, 'stored', 'a deadlock runs the attempt again');
  t.equal(attempts, 2);
  t.equal(prepared, 2, 'each attempt starts afresh');
  t.same(effects, [2], 'one effect: the first attempt was rolled back');
});

void t.test('a one-time secret is never stored', async (t) => {
  const u = new InMemoryUnitOfWork();
  const s = new InMemoryIdempotencyStore(u);
  const input = attemptInput(
    u,
    s,
    () => Promise.resolve(answer(201, { id: newId(), token: 'tok_secret' })),
    {
      oneTimeSecret: true,
    },
  );
  t.equal((await runAttempt(input, 'a')).kind, 'stored');
  const row = s.recall(input.request.principalId, input.request.key, input.now());
  t.same(row?.body, { one_time_secret: true });
  t.notOk(JSON.stringify(row).includes('tok_secret'));
});

void t.test('scope: undefined is anonymous, anything but an id is refused', async (t) => {
  const { default: Fastify } = await import('fastify');
  const { idempotencyPlugin } = await import('./plugin.js');
  for (const [returned, status] of [
    [undefined, 201],
    [42, 500],
    ['', 500],
  ] as const) {
    const app = Fastify();
    let runs = 0;
    await app.register(idempotencyPlugin, {
      store,
      transaction: uow,
      scope: () => returned as unknown as string,
    });
    app.post(
      '/x',
      { config: { idempotent: true }, schema: { operationId: 'x' } },
      async (_req, reply) => {
        runs++;
        reply.code(201);
        return Promise.resolve({ ok: true });
      },
    );
    const res = await app.inject({
      method: 'POST',
      url: '/x',
      headers: { 'content-type': 'application/json', 'idempotency-key': newId() },
      payload: '{}',
    });
    t.equal(
      res.statusCode,
      status,
      `scope returned ${typeof returned === 'string' ? `"${returned}"` : String(returned)}`,
    );
    if (status === 500) {
      t.match(res.json<{ code: string }>().code, 'FST_IDEMPOTENCY_INVALID_OPTION');
      t.equal(runs, 0, 'the handler did not run');
    } else {
      t.equal(res.headers['idempotent-replay'], undefined, 'the header had no effect');
    }
    await app.close();
  }
});
