/**
 * Model-based test of the idempotency capability: random sequences of
 * requests against the whole application on a real PostgreSQL (two
 * instances on one database, as two api processes would be), every answer
 * judged by the pure reference model in model.ts, which encodes
 * ../shared/design/01-idempotency.md.
 *
 * What it proves: for every generated sequence (keyed and unkeyed requests
 * from three principals and an anonymous caller; keys reused from a small
 * pool with the same request, or another body, path, method or If-Match,
 * under another principal, in another key spelling or an equivalent body
 * spelling; invalid keys, a missing required key, a query string, broken or
 * non-JSON bodies; handler outcomes that are stored (2xx, 400, 404, 409) and
 * ones that are not (401, 428, 429, 500); one-time secrets; two or three
 * requests at a time, or a first request held in its handler while its
 * duplicates arrive; the clock moved to and past the key's time to live; the
 * cleanup job) every answer's status, `Idempotent-Replay`, content type,
 * ETag, Location, correlation id and bytes are what the specification
 * allows, and after every step the rows of idempotency_keys, the effect
 * rows, the handler runs and the counter idempotency_requests_total are
 * exactly the model's.
 *
 * Each fast-check run gets a fresh key space (four new UUIDv7 keys and a new
 * label prefix) on one application, so runs never see each other's rows.
 * Assertions are on outcomes only: where timing decides (requests at the same
 * time), the model accepts every answer the specification allows.
 *
 * Left to other tests: injected faults (retries after a deadlock, a failing
 * commit, the transaction timeout, a lost connection), 413 and the bodies
 * PostgreSQL cannot store, real sockets, the cleanup job's batching and
 * scheduling (the job is called directly here), and the application's own
 * keyed routes.
 *
 * Replay: the seed is printed (`# seed ...`): drawn afresh in every run,
 * `make check` included, or taken from SEED (or MODEL_SEED) when set. A
 * failure prints the seed, the path and the shrunk steps (with a
 * `replayPath`); run exactly that case again with
 *   SEED=<seed> MODEL_PATH=<path> MODEL_REPLAY_PATH=<replayPath> \
 *     npx tap test/reliability/model.test.ts --disable-coverage
 * MODEL_RUNS overrides the number of runs; SOAK=1 runs the long variant.
 */
import fc from 'fast-check';
import t from 'tap';
import type { App } from '../../apps/server/app.js';
import { newId } from '../../kernel/ids/index.js';
import { secondInstance, startTestApp, type TestApp, type TestPrincipal } from '../harness/app.js';
import { describeSeed, pickSeed } from '../harness/seed.js';
import { bySoak, soak } from '../harness/soak.js';
import {
  advance,
  cleanup,
  compareDb,
  explore,
  initialState,
  KEY_OUTCOMES,
  OPS,
  payloadOf,
  PRINCIPALS,
  ROUTES,
  slotOf,
  step,
  TTL_MS,
  type BodyForm,
  type DbRow,
  type Explanation,
  type KeyChoice,
  type KeyForm,
  type Observed,
  type Op,
  type Outcome,
  type PrincipalName,
  type Req,
  type RouteName,
  type State,
  type Who,
} from './model.js';

// The soak variant runs far longer than the suite's file timeout.
if (soak) t.setTimeout(30 * 60_000);

/**
 * The seed: MODEL_SEED or SEED when set (a replay), else drawn afresh, so
 * every run, `make check` included, explores steps no earlier run tried.
 */
const SEED = pickSeed('MODEL_SEED');
/** Steps (commands) a normal run must check at least. */
const MIN_STEPS = bySoak(2000, 15000);
/** fast-check runs; each is a fresh key space with up to MAX_COMMANDS steps. */
const RUNS = Number(process.env['MODEL_RUNS'] ?? bySoak(70, 500));
const MAX_COMMANDS = 80;
/**
 * `database.lock_timeout` of the second instance: how long a duplicate waits
 * for a first request there (in memory or at the key) before it answers 409.
 */
const SHORT_WAIT = '50ms';

/** The model's side of a run: its state and the requests sent so far. */
interface ModelBox {
  state: State;
  readonly history: Req[];
  /** Gates used so far in the run (each gate is used once). */
  gates: number;
}

/** The system's side of a run. */
interface Real {
  readonly k: TestApp;
  readonly apps: readonly [App, App];
  readonly principals: Readonly<Record<PrincipalName, TestPrincipal>>;
  /** The run's key pool. */
  readonly keys: readonly string[];
  readonly tag: string;
  /** Handler runs before the run started. */
  readonly callsBefore: Readonly<Record<Op, number>>;
  /** Outcome counters before the run started. */
  readonly outcomesBefore: Readonly<Record<string, number>>;
}

/** A request to send, resolved against the history when the step runs. */
type Spec =
  | { readonly kind: 'fresh'; readonly req: Req }
  | {
      readonly kind: 'repeat';
      readonly back: number;
      readonly patch: Patch;
      readonly fallback: Req;
    }
  | { readonly kind: 'dup'; readonly patch: Patch };

/** One change to a repeated request (or none). */
type Patch =
  | { readonly field: 'none' }
  | { readonly field: 'instance'; readonly value: 0 | 1 }
  | { readonly field: 'keyForm'; readonly value: KeyForm }
  | { readonly field: 'body'; readonly value: BodyForm }
  | { readonly field: 'who'; readonly value: Who }
  | { readonly field: 'label'; readonly value: number }
  | { readonly field: 'outcome'; readonly value: Outcome }
  | { readonly field: 'route'; readonly value: RouteName }
  | { readonly field: 'ifMatch'; readonly value: string | null }
  | { readonly field: 'ifNoneMatch'; readonly value: string | null };

function applyPatch(req: Req, patch: Patch): Req {
  switch (patch.field) {
    case 'none':
      return req;
    case 'keyForm':
      return req.key.kind === 'pool' ? { ...req, key: { ...req.key, form: patch.value } } : req;
    case 'instance':
      return { ...req, instance: patch.value };
    case 'body':
      return { ...req, body: patch.value };
    case 'who':
      return { ...req, who: patch.value };
    case 'label':
      return { ...req, label: patch.value };
    case 'outcome':
      return { ...req, outcome: patch.value };
    case 'route':
      return { ...req, route: patch.value };
    case 'ifMatch':
      return { ...req, ifMatch: patch.value };
    case 'ifNoneMatch':
      return { ...req, ifNoneMatch: patch.value };
  }
}

function resolve(spec: Spec, history: readonly Req[], first: Req | undefined): Req {
  switch (spec.kind) {
    case 'fresh':
      return spec.req;
    case 'repeat': {
      if (history.length === 0) return spec.fallback;
      const base = history[history.length - 1 - (spec.back % history.length)]!;
      return applyPatch(base, spec.patch);
    }
    case 'dup':
      return first === undefined
        ? applyPatch(history.at(-1)!, spec.patch)
        : applyPatch(first, spec.patch);
  }
}

function describe(req: Req): string {
  const key =
    req.key.kind === 'pool'
      ? `key${String(req.key.index)}(${req.key.form})`
      : req.key.kind === 'none'
        ? 'no key'
        : `invalid key (${req.key.how})`;
  const route = ROUTES[req.route];
  return `${req.who} ${route.method} ${route.path}${req.query ? '?debug=1' : ''} ${key} l${String(
    req.label,
  )} ${req.outcome}${req.ifMatch === null ? '' : ` If-Match:${req.ifMatch}`}${
    req.ifNoneMatch === null ? '' : ` If-None-Match:${req.ifNoneMatch}`
  }${req.gate === undefined ? '' : ` gate:${req.gate}`} ${req.body} @${String(req.instance)}`;
}

function describeObs(obs: Observed): string {
  return `${String(obs.status)}${obs.replay ? ' replay' : ''} ${obs.body.slice(0, 300)}`;
}

function describePatch(p: Patch): string {
  return p.field === 'none' ? 'same' : `${p.field}=${JSON.stringify(p.value)}`;
}

function describeSpec(spec: Spec): string {
  switch (spec.kind) {
    case 'fresh':
      return describe(spec.req);
    case 'repeat':
      return `repeat(-${String(spec.back)}, ${describePatch(spec.patch)})`;
    case 'dup':
      return `dup(${describePatch(spec.patch)})`;
  }
}

/** Sends one request through `inject` to the instance it names. */
async function send(real: Real, req: Req): Promise<Observed> {
  const route = ROUTES[req.route];
  const headers: Record<string, string> = {
    'content-type': req.body === 'text' ? 'text/plain' : 'application/json',
  };
  if (req.who !== 'anon') Object.assign(headers, real.principals[req.who].headers);
  if (req.key.kind === 'pool') {
    const key = real.keys[req.key.index]!;
    headers['idempotency-key'] =
      req.key.form === 'upper' ? key.toUpperCase() : req.key.form === 'quoted' ? `"${key}"` : key;
  }
  const multi: Record<string, string[]> = {};
  if (req.key.kind === 'invalid') {
    if (req.key.how === 'v4') {
      // A UUID, but not the version the specification asks for.
      headers['idempotency-key'] = '9b2f1a4e-8c3d-4e5f-9a6b-7c8d9e0f1a2b';
    } else if (req.key.how === 'garbage') {
      headers['idempotency-key'] = 'not-a-key';
    } else {
      multi['idempotency-key'] = [real.keys[0]!, real.keys[1]!];
    }
  }
  if (req.ifMatch !== null) headers['if-match'] = req.ifMatch;
  if (req.ifNoneMatch !== null) headers['if-none-match'] = req.ifNoneMatch;
  const res = await real.apps[req.instance].http.inject({
    method: route.method,
    url: `${route.path}${req.query ? '?debug=1' : ''}`,
    headers: { ...headers, ...multi },
    payload: payloadOf(real.tag, req),
  });
  const header = (name: string): string | undefined => {
    const v = res.headers[name];
    return v === undefined ? undefined : Array.isArray(v) ? v.join(', ') : String(v);
  };
  return {
    status: res.statusCode,
    replay: header('idempotent-replay'),
    contentType: header('content-type'),
    retryAfter: header('retry-after'),
    etag: header('etag'),
    location: header('location'),
    correlationId: header('correlation-id'),
    body: res.body,
  };
}

/** The counter idempotency_requests_total by `operationId/outcome`. */
function outcomeCounts(k: TestApp): Record<string, number> {
  const out: Record<string, number> = {};
  for (const op of OPS) {
    for (const outcome of KEY_OUTCOMES) {
      out[`${op}/${outcome}`] =
        k.metrics.value('idempotency_requests_total', { route: op, outcome }) ?? 0;
    }
  }
  return out;
}

/** Reads what PostgreSQL holds for the run: key rows, effect labels, handler runs. */
async function readDb(real: Real): Promise<{
  rows: DbRow[];
  effects: string[];
  calls: Record<Op, number>;
  outcomes: Record<string, number>;
}> {
  const { k, keys, tag } = real;
  const byId = new Map<string, PrincipalName>(
    PRINCIPALS.map((p) => [real.principals[p].id, p] as const),
  );
  const [rows, effects] = await Promise.all([
    k.tdb.owner<
      {
        principal_id: string;
        key: string;
        action: string;
        state: string;
        response_status: number | null;
        response_body: unknown;
        resource_id: string | null;
        created_at: Date;
        expires_at: Date;
      }[]
    >`select principal_id, key, action, state, response_status, response_body, resource_id,
             created_at, expires_at
        from idempotency_keys where key in ${k.tdb.owner(keys)}`,
    k.tdb.owner<{ label: string }[]>`
      select label from test_effects where starts_with(label, ${`${tag}.`})`,
  ]);
  const calls = Object.fromEntries(
    OPS.map((op) => [op, (k.calls.get(op) ?? 0) - real.callsBefore[op]]),
  ) as Record<Op, number>;
  const now = outcomeCounts(k);
  const outcomes = Object.fromEntries(
    Object.entries(now).map(([name, n]) => [name, n - (real.outcomesBefore[name] ?? 0)]),
  );
  return {
    outcomes,
    rows: rows.map((r) => ({
      principal: byId.get(r.principal_id) ?? (r.principal_id as PrincipalName),
      key: keys.indexOf(r.key),
      action: r.action,
      state: r.state,
      status: r.response_status,
      body: r.response_body,
      resourceId: r.resource_id,
      createdAt: r.created_at.getTime(),
      expiresAt: r.expires_at.getTime(),
    })),
    effects: effects.map((e) => e.label.slice(tag.length + 1)),
    calls,
  };
}

/** Counts of what the runs checked. */
const counted = {
  runs: 0,
  steps: 0,
  requests: 0,
  bursts: 0,
  held: 0,
  advances: 0,
  cleanups: 0,
};
/** How often each rule of the model judged an answer. */
const rules = new Map<string, number>();
function tally(what: string): void {
  rules.set(what, (rules.get(what) ?? 0) + 1);
}

/**
 * Checks the database against the candidate states and keeps the first that
 * agrees.
 *
 * @returns the state that agrees with PostgreSQL.
 * @throws Error naming the differences when none does.
 */
async function settle(real: Real, candidates: readonly State[], context: string): Promise<State> {
  const db = await readDb(real);
  const diffs: string[] = [];
  for (const s of candidates) {
    const d = compareDb(s, db.rows, db.effects, db.calls, db.outcomes);
    if (d.length === 0) return s;
    diffs.push(d.join('; '));
  }
  throw new Error(`divergence in the database after ${context}:\n  ${diffs.join('\n  ')}`);
}

class SendCommand implements fc.AsyncCommand<ModelBox, Real> {
  private last = '';
  constructor(readonly spec: Spec) {}
  /** A fresh copy per run, so a report shows what its own run resolved. */
  [fc.cloneMethod](): SendCommand {
    return new SendCommand(this.spec);
  }
  check(): boolean {
    return true;
  }
  async run(m: ModelBox, real: Real): Promise<void> {
    const req = resolve(this.spec, m.history, undefined);
    this.last = describe(req);
    const obs = await send(real, req);
    const v = step(m.state, req, obs);
    if (!v.ok) {
      throw new Error(
        `divergence: ${describe(req)}\n  answered ${describeObs(obs)}\n  model: ${v.why}`,
      );
    }
    m.state = await settle(real, [v.state], `${describe(req)} (${v.what})`);
    tally(v.what);
    m.history.push(req);
    counted.steps++;
    counted.requests++;
  }
  toString(): string {
    const resolved = this.last === '' || this.spec.kind === 'fresh' ? '' : ` = ${this.last}`;
    return `send(${describeSpec(this.spec)})${resolved}`;
  }
}

class BurstCommand implements fc.AsyncCommand<ModelBox, Real> {
  private last = '';
  constructor(readonly specs: readonly Spec[]) {}
  /** A fresh copy per run, so a report shows what its own run resolved. */
  [fc.cloneMethod](): BurstCommand {
    return new BurstCommand(this.specs);
  }
  check(): boolean {
    return true;
  }
  async run(m: ModelBox, real: Real): Promise<void> {
    const reqs: Req[] = [];
    for (const spec of this.specs) reqs.push(resolve(spec, m.history, reqs[0]));
    this.last = reqs.map(describe).join(' | ');
    const obs = await Promise.all(reqs.map((r) => send(real, r)));
    const { explanations, failures } = explore(m.state, reqs, obs);
    const shown = reqs
      .map((r, i) => `\n  ${describe(r)}\n    answered ${describeObs(obs[i]!)}`)
      .join('');
    if (explanations.length === 0) {
      throw new Error(
        `divergence in a burst: no order of these explains the answers:${shown}\n  model: ${failures.join('\n  model: ')}`,
      );
    }
    m.state = await settle(
      real,
      explanations.map((e) => e.state),
      `the burst${shown}`,
    );
    for (const what of explanations[0]!.what) tally(`burst: ${what}`);
    m.history.push(...reqs);
    counted.steps++;
    counted.bursts++;
    counted.requests += reqs.length;
  }
  toString(): string {
    return `burst(${this.specs.map(describeSpec).join(', ')})${this.last === '' ? '' : ` = ${this.last}`}`;
  }
}

/**
 * A first request stopped in its handler (at a gate) while others are sent,
 * then let go: every other request on its key must answer `409
 * request_in_progress` and change nothing. The others go to the second
 * instance, whose short lock timeout makes them give up quickly.
 */
class HeldCommand implements fc.AsyncCommand<ModelBox, Real> {
  private last = '';
  constructor(
    readonly first: Spec,
    readonly others: readonly Spec[],
  ) {}
  /** A fresh copy per run, so a report shows what its own run resolved. */
  [fc.cloneMethod](): HeldCommand {
    return new HeldCommand(this.first, this.others);
  }
  check(): boolean {
    return true;
  }
  async run(m: ModelBox, real: Real): Promise<void> {
    const gate = `${m.state.tag}.g${String(m.gates++)}`;
    const a: Req = { ...resolve(this.first, m.history, undefined), gate };
    const slot = slotOf(a);
    const others = this.others.map((spec): Req => {
      const b: Req = { ...resolve(spec, m.history, a), instance: 1 };
      if (b.gate !== gate || (slotOf(b) !== null && slotOf(b) === slot)) return b;
      // Only a duplicate on the held key may name the gate: anything else
      // would run its handler and wait at the gate too.
      const { gate: _gate, ...rest } = b;
      return rest;
    });
    this.last = [a, ...others].map(describe).join(' | ');
    const pending = send(real, a);
    const entered = await Promise.race([
      real.k.gates.entered(gate).then(() => true),
      pending.then(() => false),
    ]);
    if (!entered) real.k.gates.release(gate);
    let timer: NodeJS.Timeout | undefined;
    const othersObs = await Promise.race([
      Promise.all(others.map((r) => send(real, r))),
      new Promise<null>((resolve) => {
        timer = setTimeout(() => {
          resolve(null);
        }, 60_000);
      }),
    ]);
    clearTimeout(timer);
    real.k.gates.release(gate);
    const firstObs = await pending;
    if (othersObs === null) {
      throw new Error(
        `divergence: requests sent while the first held its key never answered: ${this.last}`,
      );
    }
    const reqs = [a, ...others];
    const obs = [firstObs, ...othersObs];
    const shown = reqs
      .map((r, i) => `\n  ${describe(r)}\n    answered ${describeObs(obs[i]!)}`)
      .join('');
    let explanations: Explanation[];
    let failures: string[];
    if (entered) {
      ({ explanations, failures } = explore(m.state, reqs, obs, 0));
    } else {
      // The first answered without reaching its handler: it came first, the
      // others after it, at the same time.
      const v = step(m.state, a, firstObs);
      if (v.ok) {
        ({ explanations, failures } = explore(v.state, others, othersObs));
        explanations = explanations.map((e) => ({ ...e, what: [v.what, ...e.what] }));
      } else {
        explanations = [];
        failures = [`request 0: ${v.why}`];
      }
    }
    if (explanations.length === 0) {
      throw new Error(
        `divergence with a held first request (${entered ? 'held' : 'not held'}):${shown}\n  model: ${failures.join('\n  model: ')}`,
      );
    }
    m.state = await settle(
      real,
      explanations.map((e) => e.state),
      `the held burst${shown}`,
    );
    for (const what of explanations[0]!.what) tally(`held: ${what}`);
    m.history.push(...reqs);
    counted.steps++;
    counted.held++;
    counted.requests += reqs.length;
  }
  toString(): string {
    return `held(${describeSpec(this.first)}; ${this.others.map(describeSpec).join(', ')})${
      this.last === '' ? '' : ` = ${this.last}`
    }`;
  }
}

class AdvanceCommand implements fc.AsyncCommand<ModelBox, Real> {
  constructor(readonly ms: number) {}
  check(): boolean {
    return true;
  }
  async run(m: ModelBox, real: Real): Promise<void> {
    real.k.clock.advance(this.ms);
    m.state = await settle(real, [advance(m.state, this.ms)], `advancing ${String(this.ms)} ms`);
    counted.steps++;
    counted.advances++;
  }
  toString(): string {
    return `advance(${String(this.ms)})`;
  }
}

class CleanupCommand implements fc.AsyncCommand<ModelBox, Real> {
  check(): boolean {
    return true;
  }
  async run(m: ModelBox, real: Real): Promise<void> {
    await real.k.app.sync.cleanup();
    m.state = await settle(real, [cleanup(m.state)], 'the cleanup job');
    counted.steps++;
    counted.cleanups++;
  }
  toString(): string {
    return 'cleanup()';
  }
}

const KEY_POOL = 4;

const whoArb = fc.oneof(
  { arbitrary: fc.constant<Who>('alice'), weight: 4 },
  { arbitrary: fc.constant<Who>('bob'), weight: 3 },
  { arbitrary: fc.constant<Who>('carol'), weight: 2 },
  { arbitrary: fc.constant<Who>('anon'), weight: 1 },
);
const routeArb = fc.oneof(
  { arbitrary: fc.constant<RouteName>('post'), weight: 5 },
  { arbitrary: fc.constant<RouteName>('put1'), weight: 2 },
  { arbitrary: fc.constant<RouteName>('put2'), weight: 1 },
  { arbitrary: fc.constant<RouteName>('open'), weight: 2 },
  { arbitrary: fc.constant<RouteName>('plain'), weight: 2 },
);
const keyFormArb = fc.oneof(
  { arbitrary: fc.constant<KeyForm>('bare'), weight: 4 },
  { arbitrary: fc.constant<KeyForm>('upper'), weight: 1 },
  { arbitrary: fc.constant<KeyForm>('quoted'), weight: 1 },
);
const keyArb: fc.Arbitrary<KeyChoice> = fc.oneof(
  { arbitrary: fc.constant<KeyChoice>({ kind: 'none' }), weight: 2 },
  {
    arbitrary: fc.record({
      kind: fc.constant('pool' as const),
      index: fc.nat(KEY_POOL - 1),
      form: keyFormArb,
    }),
    weight: 16,
  },
  {
    arbitrary: fc
      .constantFrom('v4' as const, 'garbage' as const, 'two' as const)
      .map((how): KeyChoice => ({ kind: 'invalid', how })),
    weight: 1,
  },
);
const outcomeArb = fc.oneof(
  { arbitrary: fc.constant<Outcome>('ok'), weight: 8 },
  {
    arbitrary: fc.constantFrom<Outcome>(
      'secret',
      'not_found',
      'conflict',
      'step_up',
      'throttled',
      'precondition',
      'crash',
      'invalid',
    ),
    weight: 8,
  },
);
const ifMatchArb = fc.oneof(
  { arbitrary: fc.constant(null), weight: 6 },
  { arbitrary: fc.constantFrom('"1"', '"2"'), weight: 2 },
);
const ifNoneMatchArb = fc.oneof(
  { arbitrary: fc.constant(null), weight: 8 },
  { arbitrary: fc.constant('*'), weight: 1 },
);
const jsonBodyArb = fc.oneof(
  { arbitrary: fc.constant<BodyForm>('compact'), weight: 6 },
  { arbitrary: fc.constantFrom<BodyForm>('spaced', 'escaped'), weight: 4 },
  { arbitrary: fc.constant<BodyForm>('duplicate'), weight: 1 },
);
const bodyArb = fc.oneof(
  { arbitrary: jsonBodyArb, weight: 18 },
  { arbitrary: fc.constantFrom<BodyForm>('broken', 'text'), weight: 1 },
);
const instanceArb = fc.constantFrom<0 | 1>(0, 1);

const reqArb: fc.Arbitrary<Req> = fc.record({
  who: whoArb,
  route: routeArb,
  key: keyArb,
  label: fc.nat(1),
  outcome: outcomeArb,
  ifMatch: ifMatchArb,
  ifNoneMatch: ifNoneMatchArb,
  query: fc.oneof(
    { arbitrary: fc.constant(false), weight: 30 },
    { arbitrary: fc.constant(true), weight: 1 },
  ),
  body: bodyArb,
  instance: instanceArb,
});

const patchArb: fc.Arbitrary<Patch> = fc.oneof(
  { arbitrary: fc.constant<Patch>({ field: 'none' }), weight: 8 },
  {
    arbitrary: fc.record({ field: fc.constant('instance' as const), value: instanceArb }),
    weight: 2,
  },
  {
    arbitrary: fc.record({ field: fc.constant('keyForm' as const), value: keyFormArb }),
    weight: 2,
  },
  { arbitrary: fc.record({ field: fc.constant('body' as const), value: jsonBodyArb }), weight: 2 },
  { arbitrary: fc.record({ field: fc.constant('who' as const), value: whoArb }), weight: 1 },
  { arbitrary: fc.record({ field: fc.constant('label' as const), value: fc.nat(1) }), weight: 1 },
  {
    arbitrary: fc.record({ field: fc.constant('outcome' as const), value: outcomeArb }),
    weight: 1,
  },
  { arbitrary: fc.record({ field: fc.constant('route' as const), value: routeArb }), weight: 1 },
  {
    arbitrary: fc.record({ field: fc.constant('ifMatch' as const), value: ifMatchArb }),
    weight: 1,
  },
  {
    arbitrary: fc.record({ field: fc.constant('ifNoneMatch' as const), value: ifNoneMatchArb }),
    weight: 1,
  },
);

const freshArb: fc.Arbitrary<Spec> = reqArb.map((req) => ({ kind: 'fresh', req }));
const repeatArb: fc.Arbitrary<Spec> = fc
  .record({ back: fc.nat(5), patch: patchArb, fallback: reqArb })
  .map((r) => ({ kind: 'repeat', ...r }));
const dupArb: fc.Arbitrary<Spec> = patchArb.map((patch) => ({ kind: 'dup', patch }));

/** Hours and the edges of the time to live. */
const advanceArb = fc.constantFrom(1, 3_600_000, 6 * 3_600_000, 12 * 3_600_000, TTL_MS - 1, TTL_MS);

const commandArb: fc.Arbitrary<fc.AsyncCommand<ModelBox, Real>> = fc.oneof(
  { arbitrary: freshArb.map((s) => new SendCommand(s)), weight: 8 },
  { arbitrary: repeatArb.map((s) => new SendCommand(s)), weight: 10 },
  {
    arbitrary: fc
      .tuple(
        fc.oneof(freshArb, repeatArb),
        fc.array(
          fc.oneof(
            { arbitrary: dupArb, weight: 3 },
            { arbitrary: fc.oneof(freshArb, repeatArb), weight: 1 },
          ),
          {
            minLength: 1,
            maxLength: 2,
          },
        ),
      )
      .map(([first, rest]) => new BurstCommand([first, ...rest])),
    weight: 6,
  },
  {
    arbitrary: fc
      .tuple(
        fc.oneof(freshArb, repeatArb),
        fc.array(
          fc.oneof(
            { arbitrary: dupArb, weight: 3 },
            { arbitrary: fc.oneof(freshArb, repeatArb), weight: 1 },
          ),
          { minLength: 1, maxLength: 2 },
        ),
      )
      .map(([first, rest]) => new HeldCommand(first, rest)),
    weight: 2,
  },
  { arbitrary: advanceArb.map((ms) => new AdvanceCommand(ms)), weight: 2 },
  { arbitrary: fc.constant(null).map(() => new CleanupCommand()), weight: 1 },
);

void t.test(
  'the application agrees with the reference model of 01-idempotency.md over random request sequences',
  async (t) => {
    const k = await startTestApp(t);
    const other = await secondInstance(t, k, { env: { DATABASE__LOCK_TIMEOUT: SHORT_WAIT } });
    const created = await k.app.identity.createPrincipalWithToken({ displayName: 'Carol' });
    const carol: TestPrincipal = {
      id: created.principalId,
      token: created.token,
      headers: { authorization: `Bearer ${created.token}` },
    };
    const principals = { alice: k.alice, bob: k.bob, carol };
    const seed = SEED.value;
    const path = process.env['MODEL_PATH'];
    const replayPath = process.env['MODEL_REPLAY_PATH'];
    t.comment(
      `${describeSeed(SEED)}${path === undefined ? '' : ` path ${path}`}, ${String(RUNS)} runs of up to ${String(
        MAX_COMMANDS,
      )} steps (one case: add MODEL_PATH=<path>)`,
    );
    const started = Date.now();
    const setup = (): { model: ModelBox; real: Real } => {
      counted.runs++;
      const tag = `m${newId().slice(-12)}`;
      const callsBefore = Object.fromEntries(OPS.map((op) => [op, k.calls.get(op) ?? 0])) as Record<
        Op,
        number
      >;
      return {
        model: { state: initialState(tag, k.clock.now().getTime()), history: [], gates: 0 },
        real: {
          k,
          apps: [k.app, other],
          principals,
          keys: Array.from({ length: KEY_POOL }, () => newId()),
          tag,
          callsBefore,
          outcomesBefore: outcomeCounts(k),
        },
      };
    };
    const result = await fc.check(
      fc.asyncProperty(
        fc.commands([commandArb], {
          maxCommands: MAX_COMMANDS,
          size: 'max',
          ...(replayPath === undefined ? {} : { replayPath }),
        }),
        async (cmds) => {
          await fc.asyncModelRun(setup, cmds);
        },
      ),
      {
        seed,
        numRuns: RUNS,
        ...(path === undefined ? {} : { path, endOnFailure: true }),
      },
    );
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    if (result.failed) {
      const cause =
        result.errorInstance instanceof Error
          ? result.errorInstance.message
          : String(result.errorInstance);
      t.comment(`${fc.defaultReportMessage(result) ?? 'the property failed'}\n${cause}`);
      t.fail(
        `the system diverged from the model (seed ${String(result.seed)}, path ${String(
          result.counterexamplePath,
        )}; the report and the shrunk steps are above)`,
      );
      return;
    }
    t.comment(
      `${String(counted.steps)} steps (${String(counted.requests)} requests, ${String(
        counted.bursts,
      )} bursts, ${String(counted.held)} held, ${String(counted.advances)} clock moves, ${String(counted.cleanups)} cleanups) in ${String(
        counted.runs,
      )} runs, ${seconds} s`,
    );
    t.comment(
      [...rules.entries()]
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([what, n]) => `${String(n).padStart(5)} ${what}`)
        .join('\n'),
    );
    if (path !== undefined) return;
    t.ok(
      counted.steps >= MIN_STEPS,
      `no divergence in ${String(counted.steps)} steps over ${String(counted.runs)} runs (seed ${String(
        seed,
      )}); at least ${String(MIN_STEPS)} are required`,
    );
  },
);
