/**
 * Every keyed route of the application documents an example request body;
 * sent twice under one key, the example succeeds the first time (a 2xx:
 * the path names a resource of the caller, the body's ids accounts of the
 * caller) and the repeat is the replay. A route whose path or example
 * needs a resource of the caller gets it from the fixtures below; a new
 * keyed route with such a need and no fixture fails here with a 404.
 */
import t from 'tap';
import { newId } from '../kernel/ids/index.js';
import { startTestApp } from './harness/app.js';

interface Operation {
  operationId?: string;
  parameters?: { name: string; in: string }[];
  requestBody?: {
    content?: Record<string, { schema?: { examples?: unknown[] }; example?: unknown }>;
  };
}

/** What one keyed operation needs besides its example: path values, body ids, headers. */
interface Fixture {
  readonly path?: Record<string, string>;
  readonly body?: Record<string, string>;
  readonly headers?: Record<string, string>;
}

/** The keyed operations of the application and the test module. */
const KEYED = [
  'createAccount',
  'createEffect',
  'createToken',
  'createTransfer',
  'openEffect',
  'putEffect',
  'renameAccount',
  'revokeToken',
];

void t.test(
  'each keyed route answers its documented example with a 2xx, then replays it',
  async (t) => {
    const k = await startTestApp(t);
    const json = { ...k.alice.headers, 'content-type': 'application/json' };
    const account = async (name: string) => {
      const res = await k.app.http.inject({
        method: 'POST',
        url: '/api/v1/accounts',
        headers: json,
        payload: { name, opening_balance: 10_000 },
      });
      return res.json<{ id: string }>().id;
    };
    const [from, to, renamed] = [await account('From'), await account('To'), await account('Old')];
    const token = await k.app.http.inject({
      method: 'POST',
      url: '/api/v1/tokens',
      headers: json,
      payload: { name: 'to revoke' },
    });
    const fixtures: Record<string, Fixture> = {
      createTransfer: { body: { from_account_id: from, to_account_id: to } },
      renameAccount: { path: { id: renamed }, headers: { 'if-match': '"1"' } },
      revokeToken: { path: { id: token.json<{ id: string }>().id } },
    };
    const doc = k.app.http.swagger() as unknown as {
      paths: Record<string, Record<string, Operation>>;
    };
    const seen: string[] = [];
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(operations)) {
        if (!op.parameters?.some((p) => p.name === 'Idempotency-Key' && p.in === 'header'))
          continue;
        const name = String(op.operationId);
        seen.push(name);
        const fixture = fixtures[name] ?? {};
        const content = op.requestBody?.content?.['application/json'];
        const documented = content?.schema?.examples?.[0] ?? content?.example;
        if (op.requestBody !== undefined)
          t.ok(documented !== undefined, `${name} documents an example body`);
        const example =
          documented === undefined
            ? undefined
            : { ...(documented as Record<string, unknown>), ...fixture.body };
        const url = path.replace(/\{([^}]+)\}/g, (_, p: string) => fixture.path?.[p] ?? newId());
        const key = newId();
        const send = () =>
          k.app.http.inject({
            method: method.toUpperCase() as 'POST',
            url,
            headers: {
              ...k.alice.headers,
              ...fixture.headers,
              'idempotency-key': key,
              ...(example === undefined ? {} : { 'content-type': 'application/json' }),
            },
            ...(example === undefined ? {} : { payload: JSON.stringify(example) }),
          });
        const first = await send();
        const success = first.statusCode >= 200 && first.statusCode < 300;
        // The body only when it failed: a 2xx of createToken holds a secret.
        t.ok(
          success,
          `${name}: first answer ${String(first.statusCode)} is a 2xx`,
          success ? {} : { body: first.body },
        );
        const again = await send();
        t.equal(again.headers['idempotent-replay'], 'true', `${name} replays`);
        // A one-time secret is never stored: its repeat is 409 one_time_secret.
        if (again.statusCode !== 409)
          t.same(again.rawPayload, first.rawPayload, `${name}: same bytes`);
        else
          t.equal(again.json<{ reason?: string }>().reason, 'one_time_secret', `${name}: a secret`);
      }
    }
    t.same(seen.sort(), KEYED, 'every keyed route was sent its example');
  },
);
