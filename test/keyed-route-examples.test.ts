/**
 * Every keyed route of the application documents an example request body;
 * sending that example twice under one key gives the replay.
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

void t.test('each keyed route replays its documented example', async (t) => {
  const k = await startTestApp(t);
  const doc = k.app.http.swagger() as unknown as {
    paths: Record<string, Record<string, Operation>>;
  };
  let keyed = 0;
  for (const [path, operations] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(operations)) {
      if (!op.parameters?.some((p) => p.name === 'Idempotency-Key' && p.in === 'header')) continue;
      keyed++;
      const json = op.requestBody?.content?.['application/json'];
      const example = json?.schema?.examples?.[0] ?? json?.example;
      if (op.requestBody !== undefined)
        t.ok(example !== undefined, `${String(op.operationId)} documents an example body`);
      const url = path.replace(/\{[^}]+\}/g, () => newId());
      const key = newId();
      const send = () =>
        k.app.http.inject({
          method: method.toUpperCase() as 'POST',
          url,
          headers: {
            ...k.alice.headers,
            'idempotency-key': key,
            ...(example === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(example === undefined ? {} : { payload: JSON.stringify(example) }),
        });
      const first = await send();
      t.ok(
        first.statusCode < 500,
        `${String(op.operationId)}: first answer ${String(first.statusCode)}`,
      );
      const again = await send();
      t.equal(again.headers['idempotent-replay'], 'true', `${String(op.operationId)} replays`);
      if (again.statusCode !== 409)
        t.same(again.rawPayload, first.rawPayload, `${String(op.operationId)}: same bytes`);
    }
  }
  t.ok(keyed >= 4, `found the keyed routes (${String(keyed)})`);
});
