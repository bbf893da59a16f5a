/**
 * The pure reference model of the idempotency capability
 * (../shared/design/01-idempotency.md), used by model.test.ts: plain
 * TypeScript with no I/O, no clock and no database.
 *
 * It holds what the specification says the system remembers (per principal
 * and key: the fingerprint, the first answer's bytes, whether it carried a
 * one-time secret, when it was stored), the effect rows and the handler runs,
 * and judges each observed answer: {@link step} says whether an answer is one
 * the specification allows and returns the next state; {@link explore} does
 * the same for requests sent at the same time (every order in which they may
 * have taken effect, each duplicate possibly answered 409
 * request_in_progress); {@link compareDb} compares the state with the rows
 * read back from PostgreSQL, the handler runs and the outcome counter.
 *
 * What the model cannot know in advance (the id of a new effect, the
 * correlation id in a problem, a secret) it learns from the first answer and
 * then holds the system to it: every replay must repeat those bytes.
 *
 * A failure is replayed through model.test.ts (see its header).
 */

/** `sync.idempotency_key_ttl` by default: 24 hours. */
export const TTL_MS = 24 * 60 * 60 * 1000;

/** The principals of a run (one more is anonymous). */
export const PRINCIPALS = ['alice', 'bob', 'carol'] as const;
/** A principal of a run. */
export type PrincipalName = (typeof PRINCIPALS)[number];
/** Who sends a request. */
export type Who = PrincipalName | 'anon';

/** How a route of the test module is declared (test/harness/app.ts). */
interface RouteSpec {
  readonly method: 'POST' | 'PUT';
  readonly path: string;
  /** `schema.operationId`, the `action` of a stored row and the handler's name. */
  readonly op: Op;
  /** `config.auth`. */
  readonly auth: 'required' | 'optional';
  /** `config.idempotent`: false, true or 'required'. */
  readonly keyed: false | true | 'required';
  /** A 201 carries `ETag` (from `version`) and `Location` (from the id). */
  readonly links: boolean;
}

/** Handler names (operationIds) of the test module. */
export const OPS = ['createEffect', 'putEffect', 'openEffect', 'plainEffect'] as const;
/** A handler name. */
export type Op = (typeof OPS)[number];

/** The routes the model sends to. */
export const ROUTES = {
  post: {
    method: 'POST',
    path: '/api/v1/effects',
    op: 'createEffect',
    auth: 'required',
    keyed: true,
    links: true,
  },
  put1: {
    method: 'PUT',
    path: '/api/v1/effects/1',
    op: 'putEffect',
    auth: 'required',
    keyed: 'required',
    links: false,
  },
  put2: {
    method: 'PUT',
    path: '/api/v1/effects/2',
    op: 'putEffect',
    auth: 'required',
    keyed: 'required',
    links: false,
  },
  open: {
    method: 'POST',
    path: '/api/v1/open-effects',
    op: 'openEffect',
    auth: 'optional',
    keyed: true,
    links: false,
  },
  plain: {
    method: 'POST',
    path: '/api/v1/plain-effects',
    op: 'plainEffect',
    auth: 'required',
    keyed: false,
    links: false,
  },
} as const satisfies Record<string, RouteSpec>;
/** A route of the model. */
export type RouteName = keyof typeof ROUTES;
/** Every route name. */
export const ROUTE_NAMES = Object.keys(ROUTES) as RouteName[];

/**
 * What the handler is asked to do (`outcome` in the body); `invalid` sends an
 * outcome the body schema refuses, so the request fails validation.
 */
export const OUTCOMES = [
  'ok',
  'secret',
  'not_found',
  'conflict',
  'step_up',
  'throttled',
  'precondition',
  'crash',
  'invalid',
] as const;
/** An outcome. */
export type Outcome = (typeof OUTCOMES)[number];

/** How an outcome answers when the handler is reached. */
interface OutcomeSpec {
  readonly status: number;
  /** The problem code (none for a 2xx). */
  readonly code?: string;
  readonly reason?: string;
  readonly retryAfter?: string;
  /** The handler runs (validation failures never reach it). */
  readonly called: boolean;
  /** A keyed answer is stored (2xx and the final problems). */
  readonly stored: boolean;
}

const RESULT: Record<Outcome, OutcomeSpec> = {
  ok: { status: 201, called: true, stored: true },
  secret: { status: 201, called: true, stored: true },
  not_found: { status: 404, code: 'not_found', called: true, stored: true },
  conflict: { status: 409, code: 'conflict', reason: 'duplicate', called: true, stored: true },
  step_up: { status: 401, code: 'step_up_required', called: true, stored: false },
  throttled: {
    status: 429,
    code: 'rate_limited',
    retryAfter: '2',
    called: true,
    stored: false,
  },
  precondition: { status: 428, code: 'precondition_required', called: true, stored: false },
  crash: { status: 500, code: 'internal_error', called: true, stored: false },
  invalid: { status: 400, code: 'validation_failed', called: false, stored: true },
};

/** How the key is written in the header (all name the same key). */
export type KeyForm = 'bare' | 'upper' | 'quoted';
/**
 * The `Idempotency-Key` header of a request: none, a key of the run's pool,
 * or an invalid one (a UUIDv4, not a UUID, or two headers).
 */
export type KeyChoice =
  | { readonly kind: 'none' }
  | { readonly kind: 'pool'; readonly index: number; readonly form: KeyForm }
  | { readonly kind: 'invalid'; readonly how: 'v4' | 'garbage' | 'two' };
/**
 * How the body is sent: three equivalent JSON texts of the same value
 * (`compact`, `spaced` with members reversed and whitespace, `escaped` with
 * a `\u` escape); `duplicate`, the same value with the label member twice
 * (refused: bodies are I-JSON); a broken JSON text; or a JSON text
 * sent as text/plain.
 */
export type BodyForm = 'compact' | 'spaced' | 'escaped' | 'duplicate' | 'broken' | 'text';

/** One request, as the model sees it. */
export interface Req {
  readonly who: Who;
  readonly route: RouteName;
  readonly key: KeyChoice;
  /** Index of the label (the label is `<run tag>.l<index>`). */
  readonly label: number;
  readonly outcome: Outcome;
  readonly ifMatch: string | null;
  readonly ifNoneMatch: string | null;
  /** A query string `?debug=1` on the URL. */
  readonly query: boolean;
  readonly body: BodyForm;
  /** Which of the two application instances (processes) receives it. */
  readonly instance: 0 | 1;
  /** A gate the handler waits at (`gate` in the body), set by the runner. */
  readonly gate?: string;
}

/** What came back for a request. */
export interface Observed {
  readonly status: number;
  /**
   * The `Idempotent-Replay` header: `'false'` on a first answer stored under
   * its key, `'true'` on a stored answer given again, absent otherwise.
   */
  readonly replay: string | undefined;
  readonly contentType: string | undefined;
  readonly retryAfter: string | undefined;
  readonly etag: string | undefined;
  readonly location: string | undefined;
  /** The `Correlation-Id` header (always the current request's). */
  readonly correlationId: string | undefined;
  /** The body bytes as text. */
  readonly body: string;
}

/** A stored answer for (principal, key). */
export interface Row {
  readonly principal: PrincipalName;
  readonly key: number;
  readonly route: RouteName;
  /** The model's fingerprint (see {@link fingerprintOf}). */
  readonly fp: string;
  readonly status: number;
  /** The first answer's bytes (for a one-time secret: the answer that carried it). */
  readonly body: string;
  /** The answer carried a one-time secret (the row holds only the marker). */
  readonly secret: boolean;
  /** Kernel clock time of the first answer, in ms. */
  readonly createdAt: number;
}

/** The model's state. */
export interface State {
  /** Prefix of this run's labels, so runs sharing a database stay apart. */
  readonly tag: string;
  /** The kernel clock, in ms. */
  readonly now: number;
  /** Stored answers by `principal/key index`, expired ones included until deleted. */
  readonly rows: Readonly<Record<string, Row>>;
  /** Labels (without the tag) of the committed effect rows, sorted. */
  readonly effects: readonly string[];
  /** Handler runs by operationId. */
  readonly calls: Readonly<Record<Op, number>>;
  /** Keyed requests by `operationId/outcome` (the counter idempotency_requests_total). */
  readonly outcomes: Readonly<Record<string, number>>;
}

/**
 * The state at the start of a run.
 *
 * @param tag the run's label prefix.
 * @param now the kernel clock, in ms.
 * @returns an empty state.
 */
export function initialState(tag: string, now: number): State {
  return {
    tag,
    now,
    rows: {},
    effects: [],
    calls: { createEffect: 0, putEffect: 0, openEffect: 0, plainEffect: 0 },
    outcomes: {},
  };
}

/** The outcomes a keyed request can end in (01-idempotency.md, Observability). */
export const KEY_OUTCOMES = [
  'stored',
  'replayed',
  'reused',
  'in_progress',
  'secret_repeat',
  'not_stored',
  'commit_failed',
  'invalid_key',
] as const;
/** A keyed request's outcome. */
export type KeyOutcome = (typeof KEY_OUTCOMES)[number];

/** The state with one more keyed request ending in `outcome` on the request's route. */
function counted(state: State, req: Req, outcome: KeyOutcome): State {
  const name = `${ROUTES[req.route].op}/${outcome}`;
  return { ...state, outcomes: { ...state.outcomes, [name]: (state.outcomes[name] ?? 0) + 1 } };
}

/**
 * The label a request carries.
 *
 * @param tag the run tag.
 * @param label the label index.
 * @returns the label text.
 */
export function labelText(tag: string, label: number): string {
  return `${tag}.l${String(label)}`;
}

/** The JSON value of a request body: `outcome` is left out for `ok`. */
function bodyValue(tag: string, req: Req): { label: string; outcome?: string; gate?: string } {
  const label = labelText(tag, req.label);
  const gate = req.gate === undefined ? {} : { gate: req.gate };
  if (req.outcome === 'ok') return { label, ...gate };
  return { label, outcome: req.outcome === 'invalid' ? 'bogus' : req.outcome, ...gate };
}

/**
 * The body bytes of a request in its form. The JSON forms but `duplicate`
 * are the same JSON value in other spellings, so they share one fingerprint.
 *
 * @param tag the run tag.
 * @param req the request.
 * @returns the payload text.
 */
export function payloadOf(tag: string, req: Req): string {
  const value = bodyValue(tag, req);
  switch (req.body) {
    case 'compact':
    case 'text':
      return JSON.stringify(value);
    case 'spaced': {
      const members = Object.entries(value)
        .reverse()
        .map(([k, v]) => ` ${JSON.stringify(k)} :\t${JSON.stringify(v)} `);
      return `{${members.join(',\n')}}`;
    }
    case 'escaped': {
      const text = JSON.stringify(value);
      // The first character of the label as a \u escape: the same string.
      const at = text.indexOf('"label":"') + '"label":"'.length;
      const code = text.charCodeAt(at).toString(16).padStart(4, '0');
      return `${text.slice(0, at)}\\u${code}${text.slice(at + 1)}`;
    }
    case 'duplicate':
      return `{"label":${JSON.stringify(value.label)},${JSON.stringify(value).slice(1)}`;
    case 'broken':
      return JSON.stringify(value).slice(0, -1);
  }
}

/**
 * Stable JSON with sorted members: for the plain values of these answers
 * (ASCII strings, integers) it is the RFC 8785 form.
 *
 * @param value a JSON value.
 * @returns its text with members sorted.
 */
export function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${sortedJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function member(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null
    ? (value as Record<string, unknown>)[name]
    : undefined;
}

const JSON_TYPE = 'application/json; charset=utf-8';
const PROBLEM_TYPE = 'application/problem+json; charset=utf-8';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** How the model files a request before looking at any stored row. */
type Plan =
  | {
      readonly kind: 'reject';
      readonly status: number;
      readonly code: string;
      readonly pointer?: string;
      /** `errors[0].code`. */
      readonly error?: string;
      /** Refused by the idempotency plugin (outcome `invalid_key`), not an earlier stage. */
      readonly byPlugin?: boolean;
    }
  | { readonly kind: 'plain' }
  | { readonly kind: 'keyed'; readonly principal: PrincipalName; readonly slot: string };

/**
 * The stages before the handler: authentication (before the body is read),
 * body parsing, then the idempotency plugin's key checks.
 */
function plan(req: Req): Plan {
  const route: RouteSpec = ROUTES[req.route];
  if (req.who === 'anon' && route.auth === 'required') {
    return { kind: 'reject', status: 401, code: 'unauthenticated' };
  }
  if (req.body === 'text') {
    return { kind: 'reject', status: 415, code: 'unsupported_media_type' };
  }
  if (req.body === 'broken') {
    return { kind: 'reject', status: 400, code: 'validation_failed', pointer: '#body' };
  }
  if (req.body === 'duplicate') {
    // I-JSON: a member named twice is refused on every route (RFC 7493).
    return {
      kind: 'reject',
      status: 400,
      code: 'validation_failed',
      pointer: '#body/label',
      error: 'duplicate_member',
    };
  }
  // The plugin acts only on flagged routes for an authenticated principal.
  if (route.keyed === false || req.who === 'anon') return { kind: 'plain' };
  if (req.key.kind === 'none') {
    return route.keyed === 'required'
      ? {
          kind: 'reject',
          status: 400,
          code: 'validation_failed',
          pointer: '#header/Idempotency-Key',
          error: 'required',
          byPlugin: true,
        }
      : { kind: 'plain' };
  }
  if (req.key.kind === 'invalid') {
    return {
      kind: 'reject',
      status: 400,
      code: 'validation_failed',
      pointer: '#header/Idempotency-Key',
      error: 'invalid_format',
      byPlugin: true,
    };
  }
  if (req.query) {
    return {
      kind: 'reject',
      status: 400,
      code: 'validation_failed',
      pointer: '#query',
      error: 'not_allowed',
      byPlugin: true,
    };
  }
  return { kind: 'keyed', principal: req.who, slot: `${req.who}/${String(req.key.index)}` };
}

/**
 * The (principal, key) a request takes, when it reaches the key at all: only
 * requests sharing one may answer each other, or 409 request_in_progress.
 *
 * @param req the request.
 * @returns `principal/key index`, or null.
 */
export function slotOf(req: Req): string | null {
  const p = plan(req);
  return p.kind === 'keyed' ? p.slot : null;
}

/**
 * The model's fingerprint: method, path (without the query), preconditions
 * and the JSON value of the body, as the specification defines it.
 */
function fingerprintOf(tag: string, req: Req): string {
  const route = ROUTES[req.route];
  // A duplicate member never gets this far (plan() refuses it).
  const body = sortedJson(bodyValue(tag, req));
  return `${route.method}\n${route.path}\n${JSON.stringify([req.ifMatch, req.ifNoneMatch])}\n${body}`;
}

/** The checks of a problem answer. */
function problemChecks(
  obs: Observed,
  status: number,
  code: string,
  opts: {
    /** The expected `Idempotent-Replay` value (undefined: absent). */
    readonly replay: 'true' | 'false' | undefined;
    readonly reason?: string | undefined;
    readonly retryAfter?: string | undefined;
    readonly pointer?: string | undefined;
    readonly error?: string | undefined;
    /** An answer of the plugin: canonical bytes, no ETag or Location on a problem. */
    readonly keyed: boolean;
  },
): string[] {
  const out: string[] = [];
  const body = parse(obs.body);
  if (obs.status !== status) out.push(`status ${String(obs.status)}, expected ${String(status)}`);
  if (member(body, 'code') !== code)
    out.push(`code ${String(member(body, 'code'))}, expected ${code}`);
  if (obs.replay !== opts.replay)
    out.push(`Idempotent-Replay ${String(obs.replay)}, expected ${String(opts.replay)}`);
  if (obs.contentType !== PROBLEM_TYPE) out.push(`content type ${String(obs.contentType)}`);
  if (opts.reason !== undefined && member(body, 'reason') !== opts.reason) {
    out.push(`reason ${String(member(body, 'reason'))}, expected ${opts.reason}`);
  }
  if (opts.retryAfter !== undefined && obs.retryAfter !== opts.retryAfter) {
    out.push(`Retry-After ${String(obs.retryAfter)}, expected ${opts.retryAfter}`);
  }
  if (opts.pointer !== undefined) {
    const errors = member(body, 'errors');
    const first: unknown = Array.isArray(errors) ? (errors as unknown[])[0] : undefined;
    if (member(first, 'pointer') !== opts.pointer) {
      out.push(`pointer ${String(member(first, 'pointer'))}, expected ${opts.pointer}`);
    }
    if (opts.error !== undefined && member(first, 'code') !== opts.error) {
      out.push(`errors[0].code ${String(member(first, 'code'))}, expected ${opts.error}`);
    }
  }
  // A problem made for this request names this request's correlation id.
  if (member(body, 'correlation_id') !== obs.correlationId) {
    out.push(`correlation_id ${String(member(body, 'correlation_id'))} is not the request's`);
  }
  if (opts.keyed) {
    if (body !== undefined && sortedJson(body) !== obs.body)
      out.push('body is not in canonical form');
    out.push(...linkChecks(obs, 'plain', status, undefined));
  }
  return out;
}

/** The checks of a 201 from the handler (a first answer, not a replay; stored when keyed). */
function createdChecks(obs: Observed, tag: string, req: Req, keyed: boolean): string[] {
  const out: string[] = [];
  const body = parse(obs.body);
  if (obs.status !== 201) return [`status ${String(obs.status)}, expected 201`];
  const mark = keyed ? 'false' : undefined;
  if (obs.replay !== mark)
    out.push(`Idempotent-Replay ${String(obs.replay)} on a first answer, expected ${String(mark)}`);
  if (obs.contentType !== JSON_TYPE) out.push(`content type ${String(obs.contentType)}`);
  const id = member(body, 'id');
  if (typeof id !== 'string' || !UUID.test(id)) out.push(`id ${String(id)}`);
  if (member(body, 'label') !== labelText(tag, req.label))
    out.push(`label ${String(member(body, 'label'))}`);
  if (member(body, 'version') !== 1) out.push(`version ${String(member(body, 'version'))}`);
  const secret = member(body, 'secret');
  if (req.outcome === 'secret') {
    if (typeof secret !== 'string' || !secret.startsWith('sk_')) out.push('no secret');
  } else if (secret !== undefined) out.push('a secret where none was asked for');
  if (keyed) {
    if (body !== undefined && sortedJson(body) !== obs.body)
      out.push('body is not in canonical form');
    out.push(...linkChecks(obs, req.route, 201, id));
  }
  return out;
}

/** ETag and Location of a keyed answer, first or replayed. */
function linkChecks(obs: Observed, route: RouteName, status: number, id: unknown): string[] {
  const out: string[] = [];
  const links = ROUTES[route].links && status === 201;
  const etag = links ? '"1"' : undefined;
  const location = links && typeof id === 'string' ? `/api/v1/effects/${id}` : undefined;
  if (obs.etag !== etag) out.push(`ETag ${String(obs.etag)}, expected ${String(etag)}`);
  if (obs.location !== location)
    out.push(`Location ${String(obs.location)}, expected ${String(location)}`);
  return out;
}

/** What the handler does for an outcome: the answer's checks and the next state. */
function runHandler(
  state: State,
  req: Req,
  obs: Observed,
  keyed: boolean,
): { errors: string[]; state: State; stored: boolean } {
  const result = RESULT[req.outcome];
  const errors =
    result.status === 201
      ? createdChecks(obs, state.tag, req, keyed)
      : problemChecks(obs, result.status, result.code ?? '', {
          replay: keyed && result.stored ? 'false' : undefined,
          reason: result.reason,
          retryAfter: result.retryAfter,
          keyed,
        });
  const op = ROUTES[req.route].op;
  const calls = result.called ? { ...state.calls, [op]: state.calls[op] + 1 } : state.calls;
  const effects =
    result.status === 201 ? [...state.effects, `l${String(req.label)}`].sort() : state.effects;
  return { errors, state: { ...state, calls, effects }, stored: keyed && result.stored };
}

/** Whether `409 request_in_progress` is an answer the specification allows. */
export type InProgress = 'no' | 'allowed' | 'required';

/** A judgement of one answer. */
export type Verdict =
  | { readonly ok: true; readonly state: State; readonly what: string }
  | { readonly ok: false; readonly why: string };

function verdict(errors: string[], state: State, what: string): Verdict {
  return errors.length === 0
    ? { ok: true, state, what }
    : { ok: false, why: `${what}: ${errors.join('; ')}` };
}

/**
 * Judges one answer: whether the specification allows it for this request
 * in this state, and the state after it.
 *
 * @param state the state before the request.
 * @param req the request.
 * @param obs the answer.
 * @param inProgress `allowed`: another request on the same key was in
 *   flight, so `409 request_in_progress` (nothing stored, no handler run) is
 *   allowed; `required`: a first request held the key (stopped in its
 *   handler, uncommitted) for the whole time, so that is the only answer.
 * @returns the verdict.
 */
export function step(
  state: State,
  req: Req,
  obs: Observed,
  inProgress: InProgress = 'no',
): Verdict {
  const p = plan(req);
  if (p.kind === 'reject') {
    return verdict(
      problemChecks(obs, p.status, p.code, {
        replay: undefined,
        pointer: p.pointer,
        error: p.error,
        keyed: false,
      }),
      p.byPlugin === true ? counted(state, req, 'invalid_key') : state,
      `refused before the handler (${String(p.status)} ${p.code})`,
    );
  }
  if (p.kind === 'plain') {
    const ran = runHandler(state, req, obs, false);
    return verdict(ran.errors, ran.state, `unkeyed run (${req.outcome})`);
  }
  if (
    inProgress === 'required' ||
    (inProgress === 'allowed' &&
      obs.status === 409 &&
      member(parse(obs.body), 'code') === 'request_in_progress')
  ) {
    return verdict(
      problemChecks(obs, 409, 'request_in_progress', {
        replay: undefined,
        retryAfter: '1',
        keyed: true,
      }),
      counted(state, req, 'in_progress'),
      inProgress === 'required'
        ? 'request_in_progress while the first held the key'
        : 'request_in_progress while a duplicate ran',
    );
  }
  const fp = fingerprintOf(state.tag, req);
  const row = state.rows[p.slot];
  if (row !== undefined && state.now < row.createdAt + TTL_MS) {
    if (row.fp !== fp) {
      return verdict(
        problemChecks(obs, 422, 'idempotency_key_reuse', { replay: undefined, keyed: true }),
        counted(state, req, 'reused'),
        'key reused for another request (422)',
      );
    }
    if (row.secret) {
      const errors = problemChecks(obs, 409, 'conflict', {
        replay: 'true',
        reason: 'one_time_secret',
        keyed: true,
      });
      const secret = member(parse(row.body), 'secret');
      if (typeof secret === 'string' && obs.body.includes(secret.slice(3))) {
        errors.push('the one-time secret was shown again');
      }
      return verdict(
        errors,
        counted(state, req, 'secret_repeat'),
        'repeat of a one-time secret (409)',
      );
    }
    const errors: string[] = [];
    if (obs.status !== row.status)
      errors.push(`status ${String(obs.status)}, expected ${String(row.status)}`);
    if (obs.replay !== 'true')
      errors.push(`Idempotent-Replay ${String(obs.replay)}, expected true`);
    if (obs.body !== row.body) errors.push(`bytes differ from the first answer ${row.body}`);
    const original = member(parse(row.body), 'correlation_id');
    if (original !== undefined && obs.correlationId === original) {
      errors.push("the Correlation-Id header is the first request's, not this one's");
    }
    const type = row.status >= 400 ? PROBLEM_TYPE : JSON_TYPE;
    if (obs.contentType !== type) errors.push(`content type ${String(obs.contentType)}`);
    errors.push(...linkChecks(obs, req.route, row.status, member(parse(row.body), 'id')));
    return verdict(
      errors,
      counted(state, req, 'replayed'),
      `replay of the stored ${String(row.status)}`,
    );
  }
  // No live row: this request runs. An expired row is deleted by begin, in
  // the attempt's transaction: replaced if the answer is stored, kept if it
  // is rolled back.
  const ran = runHandler(state, req, obs, true);
  let next = counted(ran.state, req, ran.stored ? 'stored' : 'not_stored');
  if (ran.stored && ran.errors.length === 0) {
    const stored: Row = {
      principal: p.principal,
      key: req.key.kind === 'pool' ? req.key.index : -1,
      route: req.route,
      fp,
      status: obs.status,
      body: obs.body,
      secret: req.outcome === 'secret',
      createdAt: state.now,
    };
    next = { ...next, rows: { ...next.rows, [p.slot]: stored } };
  }
  return verdict(
    ran.errors,
    next,
    `first run under the key (${req.outcome}, ${ran.stored ? 'stored' : 'not stored'}${
      row === undefined ? '' : ', over an expired row'
    })`,
  );
}

/** Every order of the indices 0..n-1. */
function permutations(n: number): number[][] {
  if (n === 0) return [[]];
  const out: number[][] = [];
  for (const rest of permutations(n - 1)) {
    for (let at = 0; at <= rest.length; at++)
      out.push([...rest.slice(0, at), n - 1, ...rest.slice(at)]);
  }
  return out;
}

/** One way the system may have ordered requests sent at the same time. */
export interface Explanation {
  readonly order: readonly number[];
  readonly what: readonly string[];
  readonly state: State;
}

/**
 * Judges answers to requests sent at the same time: they must be the answers
 * of some order of the requests run one after another, where a request whose
 * key another request of the batch also takes may instead be answered `409
 * request_in_progress` (it waited too long; nothing happened).
 *
 * @param state the state before the batch.
 * @param reqs the requests.
 * @param obs their answers, in the same order.
 * @param held the index of a request that was stopped in its handler, with
 *   its key taken, until every other request had its answer: it comes last,
 *   and every other request on its key must be `409 request_in_progress`.
 * @returns every explanation (distinct end states), and the first
 *   divergence of each order when there is none.
 */
export function explore(
  state: State,
  reqs: readonly Req[],
  obs: readonly Observed[],
  held?: number,
): { explanations: Explanation[]; failures: string[] } {
  const slots = reqs.map(slotOf);
  const heldSlot = held === undefined ? null : (slots[held] ?? null);
  const explanations: Explanation[] = [];
  const failures: string[] = [];
  const seen = new Set<string>();
  const orders = permutations(reqs.length).filter(
    (order) => held === undefined || order.at(-1) === held,
  );
  for (const order of orders) {
    let s = state;
    const what: string[] = [];
    let failed: string | null = null;
    for (const i of order) {
      const req = reqs[i]!;
      const slot = slots[i] ?? null;
      const mode: InProgress =
        slot === null || i === held
          ? 'no'
          : i !== held && slot === heldSlot
            ? 'required'
            : slots.some((x, j) => j !== i && x === slot)
              ? 'allowed'
              : 'no';
      const v = step(s, req, obs[i]!, mode);
      if (!v.ok) {
        failed = `order ${order.join(',')}: request ${String(i)}: ${v.why}`;
        break;
      }
      s = v.state;
      what[i] = v.what;
    }
    if (failed !== null) {
      failures.push(failed);
      continue;
    }
    const fingerprint = JSON.stringify(s);
    if (seen.has(fingerprint)) continue;
    seen.add(fingerprint);
    explanations.push({ order, what, state: s });
  }
  return { explanations, failures };
}

/**
 * Moves the kernel clock.
 *
 * @param state the state.
 * @param ms how far.
 * @returns the state later.
 */
export function advance(state: State, ms: number): State {
  return { ...state, now: state.now + ms };
}

/**
 * The cleanup job: deletes every row with `expires_at <= now`.
 *
 * @param state the state.
 * @returns the state without expired rows.
 */
export function cleanup(state: State): State {
  const rows = Object.fromEntries(
    Object.entries(state.rows).filter(([, r]) => r.createdAt + TTL_MS > state.now),
  );
  return { ...state, rows };
}

/** A row of idempotency_keys read back, with principal and key mapped to the model's names. */
export interface DbRow {
  readonly principal: PrincipalName;
  readonly key: number;
  readonly action: string;
  readonly state: string;
  readonly status: number | null;
  readonly body: unknown;
  readonly resourceId: string | null;
  readonly createdAt: number;
  readonly expiresAt: number;
}

/**
 * Compares the state with what PostgreSQL holds for the run, and with the
 * handler runs and outcome counters of the run.
 *
 * @param state the model's state.
 * @param rows the run's rows of idempotency_keys.
 * @param effects labels (without the tag) of the run's effect rows.
 * @param calls handler runs of the run, by operationId.
 * @param outcomes keyed requests of the run by `operationId/outcome`.
 * @returns the differences (empty when they agree).
 */
export function compareDb(
  state: State,
  rows: readonly DbRow[],
  effects: readonly string[],
  calls: Readonly<Record<Op, number>>,
  outcomes: Readonly<Record<string, number>>,
): string[] {
  const out: string[] = [];
  const expected = Object.values(state.rows);
  if (rows.length !== expected.length) {
    out.push(`${String(rows.length)} key rows, expected ${String(expected.length)}`);
  }
  for (const want of expected) {
    const got = rows.find((r) => r.principal === want.principal && r.key === want.key);
    const name = `row ${want.principal}/${String(want.key)}`;
    if (got === undefined) {
      out.push(`${name} missing`);
      continue;
    }
    const body = want.secret ? { one_time_secret: true } : parse(want.body);
    const id = want.status < 300 ? member(parse(want.body), 'id') : null;
    const checks: [string, unknown, unknown][] = [
      ['state', got.state, 'completed'],
      ['action', got.action, ROUTES[want.route].op],
      ['response_status', got.status, want.status],
      ['response_body', sortedJson(got.body), sortedJson(body)],
      ['resource_id', got.resourceId, id],
      ['created_at', got.createdAt, want.createdAt],
      ['expires_at', got.expiresAt, want.createdAt + TTL_MS],
    ];
    for (const [what, g, w] of checks) {
      if (g !== w) out.push(`${name} ${what} ${String(g)}, expected ${String(w)}`);
    }
  }
  const sortedEffects = [...effects].sort();
  if (sortedEffects.join(',') !== state.effects.join(',')) {
    out.push(`effects [${sortedEffects.join(',')}], expected [${state.effects.join(',')}]`);
  }
  for (const op of OPS) {
    if (calls[op] !== state.calls[op]) {
      out.push(`${op} ran ${String(calls[op])} times, expected ${String(state.calls[op])}`);
    }
    for (const outcome of KEY_OUTCOMES) {
      const name = `${op}/${outcome}`;
      const got = outcomes[name] ?? 0;
      const want = state.outcomes[name] ?? 0;
      if (got !== want)
        out.push(`outcome ${name} counted ${String(got)}, expected ${String(want)}`);
    }
  }
  return out;
}
