/**
 * Statement spans on a real PostgreSQL, read from the SDK's in-memory
 * exporter: with `traceStatements`, every statement of the pool and of a
 * unit of work (BEGIN and COMMIT included) is a CLIENT span under the span
 * active when it was sent, named after its operation and table, with the
 * SQLSTATE of a failure and never a parameter; without it, none.
 */
import t, { type Test } from 'tap';
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { testDatabase } from '../../test/harness/db.js';
import { recordSpans } from '../../test/harness/tracing.js';
import { testUnitOfWork } from '../../test/harness/uow.js';
import {
  describe,
  STATEMENT_ATTRIBUTES,
  STATEMENT_TRACER,
  statementSpans,
} from './statement-spans.js';

const recorder = recordSpans(t);

async function setup(t: Test, traceStatements: boolean) {
  recorder.reset();
  const tdb = await testDatabase(t);
  await tdb.owner`create table probe (id int primary key, v text)`;
  await tdb.owner.unsafe(`grant select, insert, update, delete on probe to ${tdb.state.app.name}`);
  return testUnitOfWork(t, tdb, { applicationName: 'statement-spans', max: 2, traceStatements });
}

void t.test('each statement is a span under the one active when it was sent', async (t) => {
  const { db, uow } = await setup(t, true);
  const secret = 'a value no span may carry';
  await trace.getTracer('the test').startActiveSpan('outer', async (outer) => {
    await uow.run(async () => {
      await db.sql()`insert into probe values (1, ${secret})`;
      await db.sql()`update probe set v = ${secret} where id = 1`;
    });
    await db.sql()`select v from probe where id = ${1}`;
    await t.rejects(db.sql()`insert into probe values (1, 'again')`, { code: '23505' });
    outer.end();
  });
  const spans = recorder.spans().filter((s) => s.instrumentationScope.name === STATEMENT_TRACER);
  // The unit of work's own statements are there too: its timeouts, set
  // with BEGIN, and the settings sent with the COMMIT.
  t.same(
    spans.map((s) => s.name),
    [
      'BEGIN',
      'SELECT',
      'INSERT probe',
      'UPDATE probe',
      'SELECT',
      'COMMIT',
      'SELECT',
      'INSERT probe',
    ],
  );
  const outer = recorder.spans().find((s) => s.name === 'outer');
  t.ok(
    spans.every((s) => s.parentSpanContext?.spanId === outer?.spanContext().spanId),
    'children of the span active when sent',
  );
  t.ok(
    spans.every((s) => s.kind === SpanKind.CLIENT),
    'client spans',
  );
  t.same(spans[2]?.attributes, {
    [STATEMENT_ATTRIBUTES.system]: 'postgresql',
    [STATEMENT_ATTRIBUTES.operation]: 'INSERT',
    [STATEMENT_ATTRIBUTES.collection]: 'probe',
  });
  const failed = spans[7];
  t.equal(failed?.attributes[STATEMENT_ATTRIBUTES.errorType], '23505');
  t.equal(failed?.attributes[STATEMENT_ATTRIBUTES.status], '23505');
  t.same(failed?.status, { code: SpanStatusCode.ERROR, message: '23505' });
  t.notMatch(
    JSON.stringify(spans.map((s) => [s.name, s.attributes, s.status, s.events])),
    /a value no span may carry|duplicate key/,
    'no parameter and no error message in a span',
  );
});

void t.test('without traceStatements no statement makes a span', async (t) => {
  const { db, uow } = await setup(t, false);
  await uow.run(async () => {
    await db.sql()`insert into probe values (2, 'x')`;
  });
  t.same(
    recorder.spans().filter((s) => s.instrumentationScope.name === STATEMENT_TRACER),
    [],
  );
});

void t.test('describe names the operation, and the table of a write', (t) => {
  t.same(describe('  insert into idempotency_keys (a) values ($1)'), {
    operation: 'INSERT',
    collection: 'idempotency_keys',
  });
  t.same(describe('UPDATE "accounts" set'), { operation: 'UPDATE', collection: 'accounts' });
  t.same(describe('delete from t where'), { operation: 'DELETE', collection: 't' });
  t.same(describe('select 1'), { operation: 'SELECT', collection: undefined });
  t.same(describe('savepoint s1'), { operation: 'SAVEPOINT', collection: undefined });
  t.same(describe('  '), { operation: 'QUERY', collection: undefined });
  t.end();
});

void t.test(
  'a statement that fails with a value whose code cannot be read still ends its span, and rejects nothing unhandled',
  async (t) => {
    recorder.reset();
    const unhandled: unknown[] = [];
    const listen = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on('unhandledRejection', listen);
    t.teardown(() => process.off('unhandledRejection', listen));
    const hostile = new Proxy(new Error('hostile'), {
      get() {
        throw new Error('the trap');
      },
    });
    const statement = Promise.reject(hostile);
    statementSpans.sent('select 1', statement);
    // tap's own assertions would read the Proxy: compared by identity.
    t.ok(
      await statement.then(
        () => false,
        (err: unknown) => err === hostile,
      ),
      'the caller still sees it',
    );
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 20));
    const spans = recorder.spans().filter((s) => s.instrumentationScope.name === STATEMENT_TRACER);
    t.same(
      spans.map((s) => [s.name, s.attributes[STATEMENT_ATTRIBUTES.errorType], s.status.code]),
      [['SELECT', '_OTHER', SpanStatusCode.ERROR]],
    );
    t.same(unhandled, [], 'no unhandled rejection');
  },
);
