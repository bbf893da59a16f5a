/**
 * The ledger module end to end on a real PostgreSQL 18: accounts, their
 * preconditions, and transfers that move money exactly once. After every
 * scenario the ledger's invariants are checked from the tables themselves.
 */
import t from 'tap';
import type { Test } from 'tap';
import { newId } from '../kernel/ids/index.js';
import { startTestApp, type TestApp, type TestPrincipal } from './harness/app.js';
import { assertLedgerInvariants } from './harness/ledger-invariants.js';

/** The largest amount or balance the API accepts: exact in every JSON parser. */
const MAX = Number.MAX_SAFE_INTEGER;

interface AccountBody {
  id: string;
  name: string;
  balance: number;
  version: number;
  created_at: string;
  updated_at: string;
}

interface TransferBody {
  id: string;
  from_account_id: string;
  to_account_id: string;
  amount: number;
  created_at: string;
}

interface ProblemBody {
  status: number;
  code: string;
  reason?: string;
  errors?: { pointer: string; code: string }[];
}

/**
 * A test's view of the ledger: the application and the opening balance of
 * every account the test created, which the invariants are checked against.
 */
interface Ledger {
  readonly k: TestApp;
  readonly openings: Map<string, bigint>;
}

async function ledger(t: Test, options?: Parameters<typeof startTestApp>[1]): Promise<Ledger> {
  return { k: await startTestApp(t, options), openings: new Map() };
}

function request(
  l: Ledger,
  who: TestPrincipal,
  method: 'GET' | 'POST' | 'PATCH',
  url: string,
  body?: unknown,
  headers: Record<string, string> = {},
) {
  return l.k.app.http.inject({
    method,
    url,
    headers: {
      ...who.headers,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    ...(body === undefined
      ? {}
      : { payload: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
}

/** Creates an account through the API and records its opening balance. */
async function open(
  t: Test,
  l: Ledger,
  who: TestPrincipal,
  name: string,
  openingBalance: number,
): Promise<AccountBody> {
  const res = await request(l, who, 'POST', '/api/v1/accounts', {
    name,
    opening_balance: openingBalance,
  });
  t.equal(res.statusCode, 201, `account ${name} created`);
  const account = res.json<AccountBody>();
  l.openings.set(account.id, BigInt(openingBalance));
  return account;
}

function transfer(
  l: Ledger,
  who: TestPrincipal,
  body: unknown,
  headers: Record<string, string> = {},
) {
  return request(l, who, 'POST', '/api/v1/transfers', body, headers);
}

async function balanceOf(l: Ledger, id: string): Promise<bigint> {
  const [row] = await l.k.tdb.owner<
    { balance: string }[]
  >`select balance::text as balance from ledger_accounts where id = ${id}`;
  if (row === undefined) throw new Error(`no account ${id}`);
  return BigInt(row.balance);
}

async function transferCount(l: Ledger): Promise<number> {
  const [row] = await l.k.tdb.owner<
    { n: string }[]
  >`select count(*)::text as n from ledger_transfers`;
  return Number(row?.n);
}

/** The ledger's invariants after a scenario (see test/harness/ledger-invariants.ts). */
function assertInvariants(t: Test, l: Ledger): Promise<void> {
  return assertLedgerInvariants(t, l.k.tdb.owner, l.openings);
}

void t.test('accounts: create with ETag and Location, read only by their owner', async (t) => {
  const l = await ledger(t);
  const key = newId();
  const create = () =>
    request(
      l,
      l.k.alice,
      'POST',
      '/api/v1/accounts',
      { name: 'Savings', opening_balance: 1500 },
      { 'idempotency-key': key },
    );
  const res = await create();
  t.equal(res.statusCode, 201);
  const account = res.json<AccountBody>();
  l.openings.set(account.id, 1500n);
  t.same(Object.keys(account).sort(), [
    'balance',
    'created_at',
    'id',
    'name',
    'updated_at',
    'version',
  ]);
  t.match(account, { name: 'Savings', balance: 1500, version: 1 });
  t.equal(account.created_at, l.k.clock.now().toISOString(), 'times come from the kernel clock');
  t.equal(account.updated_at, account.created_at);
  t.equal(res.headers.etag, '"1"');
  t.equal(res.headers.location, `/api/v1/accounts/${account.id}`);

  const again = await create();
  t.equal(again.statusCode, 201);
  t.equal(again.headers['idempotent-replay'], 'true');
  t.same(again.rawPayload, res.rawPayload, 'the replay is byte for byte the first answer');
  t.equal(again.headers.etag, '"1"');
  t.equal(again.headers.location, res.headers.location);

  const unkeyed = await request(l, l.k.alice, 'POST', '/api/v1/accounts', {
    name: 'Daily',
    opening_balance: 0,
  });
  t.equal(unkeyed.statusCode, 201);
  const daily = unkeyed.json<AccountBody>();
  l.openings.set(daily.id, 0n);
  t.equal(unkeyed.headers.etag, '"1"', 'an unkeyed create has the ETag too');
  t.equal(unkeyed.headers.location, `/api/v1/accounts/${daily.id}`);

  const read = await request(l, l.k.alice, 'GET', `/api/v1/accounts/${account.id}`);
  t.equal(read.statusCode, 200);
  t.equal(read.headers.etag, '"1"');
  t.same(read.json(), account);

  for (const [who, url, what] of [
    [l.k.bob, `/api/v1/accounts/${account.id}`, "another principal's account"],
    [l.k.alice, `/api/v1/accounts/${newId()}`, 'an unknown account'],
    [
      l.k.alice,
      '/api/v1/accounts/9b2f1a4e-8c3d-4e5f-9a6b-7c8d9e0f1a2b',
      'a uuid of another version',
    ],
  ] as const) {
    const missing = await request(l, who, 'GET', url);
    t.equal(missing.statusCode, 404, what);
    t.equal(missing.json<ProblemBody>().code, 'not_found', what);
    t.notOk(missing.headers.etag, `${what}: no ETag`);
  }
  const malformed = await request(l, l.k.alice, 'GET', '/api/v1/accounts/nope');
  t.equal(malformed.statusCode, 400);
  t.equal(malformed.json<ProblemBody>().errors?.[0]?.pointer, '#path/id');
  const anonymous = await l.k.app.http.inject({
    method: 'GET',
    url: `/api/v1/accounts/${account.id}`,
  });
  t.equal(anonymous.statusCode, 401);
  await assertInvariants(t, l);
});

void t.test('accounts: a schema-invalid or unfit body is 400 and stores nothing', async (t) => {
  const l = await ledger(t);
  const cases: [string, string, string][] = [
    ['missing name', '{"opening_balance":1}', '#body/name'],
    ['empty name', '{"name":"","opening_balance":1}', '#body/name'],
    ['long name', JSON.stringify({ name: 'x'.repeat(101), opening_balance: 1 }), '#body/name'],
    ['blank name', '{"name":"   ","opening_balance":1}', '#body/name'],
    ['control character', '{"name":"a\\u0007b","opening_balance":1}', '#body/name'],
    ['missing opening balance', '{"name":"a"}', '#body/opening_balance'],
    ['negative', '{"name":"a","opening_balance":-1}', '#body/opening_balance'],
    ['fraction', '{"name":"a","opening_balance":1.5}', '#body/opening_balance'],
    ['string', '{"name":"a","opening_balance":"10"}', '#body/opening_balance'],
    ['boolean', '{"name":"a","opening_balance":true}', '#body/opening_balance'],
    ['null', '{"name":"a","opening_balance":null}', '#body/opening_balance'],
    ['beyond 2^53', '{"name":"a","opening_balance":9007199254740992}', '#body/opening_balance'],
    // A double reads each of these as a whole number; as written, none is.
    [
      'a fraction read as 1',
      '{"name":"a","opening_balance":0.99999999999999999}',
      '#body/opening_balance',
    ],
    [
      'a fraction read as 100',
      '{"name":"a","opening_balance":99.999999999999999999}',
      '#body/opening_balance',
    ],
    [
      'a fraction read as 1 from above',
      '{"name":"a","opening_balance":1.0000000000000001}',
      '#body/opening_balance',
    ],
    [
      'an exponent read as 1',
      '{"name":"a","opening_balance":10000000000000001e-16}',
      '#body/opening_balance',
    ],
    ['a tiny fraction read as 0', '{"name":"a","opening_balance":1e-400}', '#body/opening_balance'],
    ['unknown member', '{"name":"a","opening_balance":1,"currency":"EUR"}', '#body'],
  ];
  for (const [what, body, pointer] of cases) {
    const res = await request(l, l.k.alice, 'POST', '/api/v1/accounts', body);
    t.equal(res.statusCode, 400, what);
    const problem = res.json<ProblemBody>();
    t.equal(problem.code, 'validation_failed', what);
    t.ok(
      problem.errors?.some((e) => e.pointer.startsWith(pointer)),
      `${what}: names ${pointer} (${JSON.stringify(problem.errors)})`,
    );
  }
  const largest = await open(t, l, l.k.alice, 'Largest', MAX);
  t.equal(largest.balance, MAX, 'the largest safe integer is a valid balance');
  // Whole numbers written with a zero fraction or an exponent are exact.
  for (const [text, value] of [
    ['150.000', 150],
    ['1.5e2', 150],
    ['15000e-2', 150],
    ['0.0', 0],
  ] as const) {
    const res = await request(
      l,
      l.k.alice,
      'POST',
      '/api/v1/accounts',
      `{"name":"Exact","opening_balance":${text}}`,
    );
    t.equal(res.statusCode, 201, `${text} is a whole number`);
    const account = res.json<AccountBody>();
    t.equal(account.balance, value, `${text} opens ${String(value)}`);
    l.openings.set(account.id, BigInt(value));
  }
  await assertInvariants(t, l);
});

void t.test(
  'rename: If-Match is required (428), checked (412), and moves the version',
  async (t) => {
    const l = await ledger(t);
    const account = await open(t, l, l.k.alice, 'Savings', 100);
    const url = `/api/v1/accounts/${account.id}`;
    const rename = (name: string, headers: Record<string, string> = {}) =>
      request(l, l.k.alice, 'PATCH', url, { name }, headers);

    const missing = await rename('Holidays');
    t.equal(missing.statusCode, 428);
    t.equal(missing.json<ProblemBody>().code, 'precondition_required');
    const star = await rename('Holidays', { 'if-match': '*' });
    t.equal(star.statusCode, 428, 'If-Match: * does not say which version was read');
    const malformed = await rename('Holidays', { 'if-match': '1' });
    t.equal(malformed.statusCode, 400, 'an unquoted version is not an entity tag');
    t.equal(malformed.json<ProblemBody>().errors?.[0]?.pointer, '#header/If-Match');
    const stale = await rename('Holidays', { 'if-match': '"2"' });
    t.equal(stale.statusCode, 412);
    t.equal(stale.json<ProblemBody>().code, 'precondition_failed');
    const weak = await rename('Holidays', { 'if-match': 'W/"1"' });
    t.equal(weak.statusCode, 412, 'a weak tag never matches (strong comparison)');
    t.equal((await request(l, l.k.alice, 'GET', url)).json<AccountBody>().name, 'Savings');

    l.k.clock.advance(60_000);
    const key = newId();
    const good = await rename('Holidays', { 'if-match': '"1"', 'idempotency-key': key });
    t.equal(good.statusCode, 200);
    const renamed = good.json<AccountBody>();
    t.match(renamed, { id: account.id, name: 'Holidays', balance: 100, version: 2 });
    t.equal(renamed.created_at, account.created_at);
    t.equal(renamed.updated_at, l.k.clock.now().toISOString());
    t.equal(good.headers.etag, '"2"');
    const replay = await rename('Holidays', { 'if-match': '"1"', 'idempotency-key': key });
    t.equal(replay.headers['idempotent-replay'], 'true');
    t.same(replay.rawPayload, good.rawPayload);
    t.equal(replay.headers.etag, '"2"');
    const read = await request(l, l.k.alice, 'GET', url);
    t.equal(read.headers.etag, '"2"');
    t.equal(read.json<AccountBody>().version, 2, 'the replay did not rename again');

    const listed = await rename('Spare', { 'if-match': '"7", "2"' });
    t.equal(listed.statusCode, 200, 'a list matches when one of its tags does');
    t.equal(listed.headers.etag, '"3"');
    const old = await rename('Old', { 'if-match': '"2"' });
    t.equal(old.statusCode, 412, 'the version read before the last rename is stale');

    const bobs = await request(l, l.k.bob, 'PATCH', url, { name: 'Mine' }, { 'if-match': '"3"' });
    t.equal(bobs.statusCode, 404, "another principal's account is not found");
    const unknown = await request(
      l,
      l.k.alice,
      'PATCH',
      `/api/v1/accounts/${newId()}`,
      { name: 'x' },
      { 'if-match': '"1"' },
    );
    t.equal(unknown.statusCode, 404);
    const invalid = await rename('', { 'if-match': '"3"' });
    t.equal(invalid.statusCode, 400);
    t.equal((await request(l, l.k.alice, 'GET', url)).json<AccountBody>().name, 'Spare');
    await assertInvariants(t, l);
  },
);

void t.test(
  'transfers: money moves in one unit of work and the transfer can be read',
  async (t) => {
    const l = await ledger(t);
    const from = await open(t, l, l.k.alice, 'From', 1000);
    const to = await open(t, l, l.k.alice, 'To', 50);
    l.k.clock.advance(1000);
    const res = await transfer(l, l.k.alice, {
      from_account_id: from.id,
      to_account_id: to.id,
      amount: 300,
    });
    t.equal(res.statusCode, 201);
    const moved = res.json<TransferBody>();
    t.same(Object.keys(moved).sort(), [
      'amount',
      'created_at',
      'from_account_id',
      'id',
      'to_account_id',
    ]);
    t.match(moved, { from_account_id: from.id, to_account_id: to.id, amount: 300 });
    t.equal(moved.created_at, l.k.clock.now().toISOString());
    t.equal(res.headers.location, `/api/v1/transfers/${moved.id}`);
    t.equal(await balanceOf(l, from.id), 700n);
    t.equal(await balanceOf(l, to.id), 350n);

    const fromNow = await request(l, l.k.alice, 'GET', `/api/v1/accounts/${from.id}`);
    t.match(fromNow.json<AccountBody>(), { balance: 700, version: 2 });
    t.equal(fromNow.headers.etag, '"2"', 'a balance change is a new version');
    t.equal(fromNow.json<AccountBody>().updated_at, l.k.clock.now().toISOString());

    const read = await request(l, l.k.alice, 'GET', `/api/v1/transfers/${moved.id}`);
    t.equal(read.statusCode, 200);
    t.same(read.json(), moved);
    t.equal((await request(l, l.k.bob, 'GET', `/api/v1/transfers/${moved.id}`)).statusCode, 404);
    t.equal((await request(l, l.k.alice, 'GET', `/api/v1/transfers/${newId()}`)).statusCode, 404);

    const all = await transfer(l, l.k.alice, {
      from_account_id: from.id,
      to_account_id: to.id,
      amount: 700,
    });
    t.equal(all.statusCode, 201, 'the whole balance may be moved');
    t.equal(await balanceOf(l, from.id), 0n);
    await assertInvariants(t, l);
  },
);

void t.test(
  "transfers: an unknown account or another principal's is 404, and nothing moves",
  async (t) => {
    const l = await ledger(t);
    const mine = await open(t, l, l.k.alice, 'Mine', 500);
    const other = await open(t, l, l.k.alice, 'Other', 500);
    const bobs = await open(t, l, l.k.bob, 'Bobs', 500);
    const unknown = newId();
    const cases: [string, string, string, string][] = [
      ['unknown destination', mine.id, unknown, '#body/to_account_id'],
      ['unknown source', unknown, mine.id, '#body/from_account_id'],
      ["another principal's destination", mine.id, bobs.id, '#body/to_account_id'],
      ["another principal's source", bobs.id, mine.id, '#body/from_account_id'],
      [
        'a uuid of another version',
        mine.id,
        '9b2f1a4e-8c3d-4e5f-9a6b-7c8d9e0f1a2b',
        '#body/to_account_id',
      ],
    ];
    const bodies: string[] = [];
    for (const [what, fromId, toId, pointer] of cases) {
      const res = await transfer(l, l.k.alice, {
        from_account_id: fromId,
        to_account_id: toId,
        amount: 10,
      });
      t.equal(res.statusCode, 404, what);
      const problem = res.json<ProblemBody>();
      t.equal(problem.code, 'not_found', what);
      t.same(
        problem.errors?.map((e) => e.pointer),
        [pointer],
        `${what}: names the account`,
      );
      bodies.push(res.body.replace(/"correlation_id":"[^"]+"/, '').replaceAll(bobs.id, unknown));
    }
    t.equal(bodies[0], bodies[2], "another principal's account reads exactly as an unknown one");
    t.equal(bodies[1], bodies[3]);
    const key = newId();
    const keyed = () =>
      transfer(
        l,
        l.k.alice,
        { from_account_id: mine.id, to_account_id: bobs.id, amount: 10 },
        { 'idempotency-key': key },
      );
    t.equal((await keyed()).statusCode, 404);
    const replay = await keyed();
    t.equal(replay.statusCode, 404);
    t.equal(replay.headers['idempotent-replay'], 'true', 'a 404 is a final answer');
    t.equal(await transferCount(l), 0);
    for (const a of [mine, other, bobs]) t.equal(await balanceOf(l, a.id), 500n);
    const bobsRead = await request(l, l.k.bob, 'GET', `/api/v1/accounts/${bobs.id}`);
    t.equal(bobsRead.headers.etag, '"1"', "the other principal's account was not touched");
    await assertInvariants(t, l);
  },
);

void t.test(
  'transfers: insufficient funds is 409 insufficient_funds and rolls everything back',
  async (t) => {
    const l = await ledger(t);
    const from = await open(t, l, l.k.alice, 'From', 100);
    const to = await open(t, l, l.k.alice, 'To', 0);
    const key = newId();
    const attempt = () =>
      transfer(
        l,
        l.k.alice,
        { from_account_id: from.id, to_account_id: to.id, amount: 101 },
        { 'idempotency-key': key },
      );
    const res = await attempt();
    t.equal(res.statusCode, 409);
    const problem = res.json<ProblemBody>();
    t.equal(problem.code, 'conflict');
    t.equal(problem.reason, 'insufficient_funds');
    const replay = await attempt();
    t.equal(replay.statusCode, 409);
    t.equal(replay.headers['idempotent-replay'], 'true');
    const unkeyed = await transfer(l, l.k.alice, {
      from_account_id: from.id,
      to_account_id: to.id,
      amount: 101,
    });
    t.equal(unkeyed.json<ProblemBody>().reason, 'insufficient_funds');
    t.equal(await balanceOf(l, from.id), 100n, 'balances unchanged');
    t.equal(await balanceOf(l, to.id), 0n);
    t.equal(await transferCount(l), 0, 'no transfer row');
    const read = await request(l, l.k.alice, 'GET', `/api/v1/accounts/${from.id}`);
    t.equal(read.headers.etag, '"1"', 'no version moved');
    await assertInvariants(t, l);
  },
);

void t.test('transfers: a balance beyond 2^53 - 1 is 409 balance_limit', async (t) => {
  const l = await ledger(t);
  const full = await open(t, l, l.k.alice, 'Full', MAX);
  const other = await open(t, l, l.k.alice, 'Other', 1);
  const res = await transfer(l, l.k.alice, {
    from_account_id: other.id,
    to_account_id: full.id,
    amount: 1,
  });
  t.equal(res.statusCode, 409);
  t.equal(res.json<ProblemBody>().reason, 'balance_limit');
  t.equal(await balanceOf(l, full.id), BigInt(MAX));
  t.equal(await transferCount(l), 0);
  const out = await transfer(l, l.k.alice, {
    from_account_id: full.id,
    to_account_id: other.id,
    amount: MAX - 1,
  });
  t.equal(out.statusCode, 201, 'the largest amounts move exactly');
  t.equal(await balanceOf(l, other.id), BigInt(MAX));
  t.equal(
    (await request(l, l.k.alice, 'GET', `/api/v1/accounts/${other.id}`)).json<AccountBody>()
      .balance,
    MAX,
  );
  await assertInvariants(t, l);
});

void t.test('transfers: to the same account is 422 same_account', async (t) => {
  const l = await ledger(t);
  const account = await open(t, l, l.k.alice, 'Only', 100);
  for (const [what, toId] of [
    ['same id', account.id],
    ['same id in upper case', account.id.toUpperCase()],
  ] as const) {
    const res = await transfer(l, l.k.alice, {
      from_account_id: account.id,
      to_account_id: toId,
      amount: 10,
    });
    t.equal(res.statusCode, 422, what);
    const problem = res.json<ProblemBody>();
    t.equal(problem.code, 'unprocessable', what);
    t.equal(problem.reason, 'same_account', what);
  }
  t.equal(await balanceOf(l, account.id), 100n);
  t.equal(await transferCount(l), 0);
  await assertInvariants(t, l);
});

void t.test('transfers: a schema-invalid amount or account id is 400', async (t) => {
  const l = await ledger(t);
  const from = await open(t, l, l.k.alice, 'From', 100);
  const to = await open(t, l, l.k.alice, 'To', 100);
  const ids = `"from_account_id":"${from.id}","to_account_id":"${to.id}"`;
  const cases: [string, string, string][] = [
    ['zero', `{${ids},"amount":0}`, '#body/amount'],
    ['negative', `{${ids},"amount":-5}`, '#body/amount'],
    ['fraction', `{${ids},"amount":1.5}`, '#body/amount'],
    ['string', `{${ids},"amount":"10"}`, '#body/amount'],
    ['boolean', `{${ids},"amount":true}`, '#body/amount'],
    ['null', `{${ids},"amount":null}`, '#body/amount'],
    ['array', `{${ids},"amount":[10]}`, '#body/amount'],
    ['beyond 2^53', `{${ids},"amount":9007199254740993}`, '#body/amount'],
    ['exponent beyond 2^53', `{${ids},"amount":1e300}`, '#body/amount'],
    ['a fraction read as 1', `{${ids},"amount":1.0000000000000001}`, '#body/amount'],
    ['a fraction read as 7', `{${ids},"amount":6.9999999999999999e0}`, '#body/amount'],
    ['missing', `{${ids}}`, '#body/amount'],
    [
      'malformed id',
      `{"from_account_id":"x","to_account_id":"${to.id}","amount":1}`,
      '#body/from_account_id',
    ],
    ['missing id', `{"from_account_id":"${from.id}","amount":1}`, '#body/to_account_id'],
  ];
  for (const [what, body, pointer] of cases) {
    const res = await transfer(l, l.k.alice, body);
    t.equal(res.statusCode, 400, what);
    const problem = res.json<ProblemBody>();
    t.equal(problem.code, 'validation_failed', what);
    t.ok(
      problem.errors?.some((e) => e.pointer === pointer),
      `${what}: names ${pointer} (${JSON.stringify(problem.errors)})`,
    );
  }
  const key = newId();
  const keyed = () => transfer(l, l.k.alice, `{${ids},"amount":0}`, { 'idempotency-key': key });
  t.equal((await keyed()).statusCode, 400);
  t.equal((await keyed()).headers['idempotent-replay'], 'true', 'a keyed 400 is stored');
  t.equal(await transferCount(l), 0);
  t.equal(await balanceOf(l, from.id), 100n);
  await assertInvariants(t, l);
});

void t.test('transfers: a keyed transfer repeated moves the money once', async (t) => {
  const l = await ledger(t);
  const from = await open(t, l, l.k.alice, 'From', 1000);
  const to = await open(t, l, l.k.alice, 'To', 0);
  const key = newId();
  const send = () =>
    transfer(
      l,
      l.k.alice,
      { from_account_id: from.id, to_account_id: to.id, amount: 250 },
      { 'idempotency-key': key },
    );
  const first = await send();
  t.equal(first.statusCode, 201);
  t.equal(first.headers['idempotent-replay'], 'false', 'a first answer');
  for (let i = 0; i < 3; i++) {
    const again = await send();
    t.equal(again.statusCode, 201);
    t.equal(again.headers['idempotent-replay'], 'true');
    t.same(again.rawPayload, first.rawPayload);
    t.equal(again.headers.location, first.headers.location);
  }
  t.equal(await transferCount(l), 1, 'a single transfer row');
  t.equal(await balanceOf(l, from.id), 750n);
  t.equal(await balanceOf(l, to.id), 250n);
  const reused = await transfer(
    l,
    l.k.alice,
    { from_account_id: from.id, to_account_id: to.id, amount: 251 },
    { 'idempotency-key': key },
  );
  t.equal(reused.statusCode, 422, 'the key cannot move another amount');
  t.equal(reused.json<ProblemBody>().code, 'idempotency_key_reuse');
  await assertInvariants(t, l);
});

void t.test(
  'transfers: crossed transfers in parallel over real sockets complete without deadlocks',
  async (t) => {
    const retried: string[] = [];
    const l = await ledger(t, {
      // Called before each attempt's COMMIT: an attempt above 1 means the
      // unit of work retried (a deadlock, a lock timeout or a serialization
      // failure). A deadlock-free lock order needs none.
      faultHook: ({ attempt, name }) => {
        if (attempt > 1) retried.push(`${String(name)} attempt ${String(attempt)}`);
        return undefined;
      },
    });
    const a = await open(t, l, l.k.alice, 'A', 100_000);
    const b = await open(t, l, l.k.alice, 'B', 100_000);
    const c = await open(t, l, l.k.alice, 'C', 100_000);
    const base = await l.k.app.http.listen({ host: '127.0.0.1', port: 0 });
    const post = async (fromId: string, toId: string, amount: number, keyed: boolean) => {
      const res = await fetch(`${base}/api/v1/transfers`, {
        method: 'POST',
        headers: {
          ...l.k.alice.headers,
          'content-type': 'application/json',
          ...(keyed ? { 'idempotency-key': newId() } : {}),
        },
        body: JSON.stringify({ from_account_id: fromId, to_account_id: toId, amount }),
      });
      return { status: res.status, body: await res.text() };
    };
    const pairs = [
      [a.id, b.id, 7],
      [b.id, a.id, 11],
      [b.id, c.id, 13],
      [c.id, b.id, 3],
      [c.id, a.id, 5],
      [a.id, c.id, 2],
    ] as const;
    const rounds = 20;
    const answers = await Promise.all(
      Array.from({ length: rounds }, (_, round) =>
        pairs.map(([fromId, toId, amount], i) => post(fromId, toId, amount, (round + i) % 2 === 0)),
      ).flat(),
    );
    const failures = answers.filter((x) => x.status !== 201);
    t.same(failures, [], 'every transfer answered 201: no 5xx, no deadlock error');
    t.same(retried, [], 'no attempt was retried: the lock order leaves nothing to deadlock');
    t.equal(await transferCount(l), rounds * pairs.length);
    t.equal(await balanceOf(l, a.id), BigInt(100_000 + rounds * (-7 + 11 + 5 - 2)));
    t.equal(await balanceOf(l, b.id), BigInt(100_000 + rounds * (7 - 11 - 13 + 3)));
    t.equal(await balanceOf(l, c.id), BigInt(100_000 + rounds * (13 - 3 - 5 + 2)));
    const [waiting] = await l.k.tdb.owner<{ n: string }[]>`
      select count(*)::text as n from pg_locks where not granted`;
    t.equal(waiting?.n, '0', 'no session is left waiting on a lock');
    await assertInvariants(t, l);
  },
);

void t.test('an account whose version passed 2^31 still moves money and renames', async (t) => {
  const l = await ledger(t);
  const a = await open(t, l, l.k.alice, 'Busy', 100);
  const b = await open(t, l, l.k.alice, 'Other', 0);
  await l.k.tdb.owner`update ledger_accounts set version = 2147483647 where id = ${a.id}`;
  const moved = await transfer(l, l.k.alice, {
    from_account_id: a.id,
    to_account_id: b.id,
    amount: 10,
  });
  t.equal(moved.statusCode, 201, 'no integer overflow');
  const read = await request(l, l.k.alice, 'GET', `/api/v1/accounts/${a.id}`);
  t.equal(read.json<{ version: number }>().version, 2147483648);
  t.equal(read.headers.etag, '"2147483648"');
  const renamed = await request(
    l,
    l.k.alice,
    'PATCH',
    `/api/v1/accounts/${a.id}`,
    { name: 'Renamed' },
    {
      'if-match': '"2147483648"',
    },
  );
  t.equal(renamed.statusCode, 200);
  t.equal(renamed.json<{ version: number }>().version, 2147483649);
  await assertInvariants(t, l);
});

void t.test(
  'a body naming a member twice is refused on every route, pointer at the member, nothing stored',
  async (t) => {
    const l = await ledger(t);
    const a = await open(t, l, l.k.alice, 'A', 100);
    const b = await open(t, l, l.k.alice, 'B', 0);
    // The last duplicate would win in JSON.parse; another parser may keep the
    // first: a parser differential on money is refused outright (RFC 7493).
    const smuggled = `{"from_account_id":"${a.id}","to_account_id":"${b.id}","amount":1,"amount":100}`;
    for (const headers of [{}, { 'idempotency-key': newId() }]) {
      const res = await transfer(l, l.k.alice, smuggled, headers);
      t.equal(res.statusCode, 400, res.body);
      const problem = res.json<ProblemBody>();
      t.equal(problem.code, 'validation_failed');
      t.same(problem.errors, [{ pointer: '#body/amount', code: 'duplicate_member' }]);
    }
    const nested = await request(
      l,
      l.k.alice,
      'PATCH',
      `/api/v1/accounts/${a.id}`,
      '{"name":"x","name":"y"}',
      { 'if-match': `"${String(a.version)}"` },
    );
    t.equal(nested.statusCode, 400, nested.body);
    t.same(nested.json<ProblemBody>().errors, [
      { pointer: '#body/name', code: 'duplicate_member' },
    ]);
    t.equal(await transferCount(l), 0, 'no transfer');
    const [keys] = await l.k.tdb.owner<{ n: string }[]>`
      select count(*)::text as n from idempotency_keys`;
    t.equal(keys?.n, '0', 'no key stored for the refused keyed request');
    t.equal(await balanceOf(l, a.id), 100n);
    await assertInvariants(t, l);
  },
);
