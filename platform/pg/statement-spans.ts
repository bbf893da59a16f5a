/**
 * One OpenTelemetry CLIENT span per PostgreSQL statement, when the database
 * handle is made with `traceStatements` (tracing on): begun when the
 * statement is sent, under the span active then (an attempt of a keyed
 * request, a request), ended when its answer or its error arrives. The
 * span names the operation and, for a write, its table (`INSERT
 * idempotency_keys`); it never carries the statement's parameters or its
 * text, which `unsafe()` statements could hold values in.
 */
import { SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { errorType, isSqlState } from '../../kernel/errs/index.js';

/** The tracer's name: what an SDK's sampler or processor selects statement spans by. */
export const STATEMENT_TRACER = 'postgres';

// Asked for at each statement: the API keeps the first provider's tracer
// in a tracer kept across calls, so a provider registered later (after the
// first was shut down) would get nothing.
const tracer = (): ReturnType<typeof trace.getTracer> => trace.getTracer(STATEMENT_TRACER);

/** The attributes statement spans carry (OpenTelemetry's database conventions). */
export const STATEMENT_ATTRIBUTES = {
  system: 'db.system.name',
  operation: 'db.operation.name',
  collection: 'db.collection.name',
  status: 'db.response.status_code',
  errorType: 'error.type',
} as const;

/** Begins a statement's span; see the module comment. */
export interface StatementSpans {
  /**
   * Begins the span of a statement being sent, ended when it settles.
   *
   * @param text the statement's first text fragment (a template's first
   *   string, or the whole text of `unsafe()`): only its first words are read.
   * @param settled the statement's own promise, which the span waits on
   *   without handling it for anyone else.
   */
  sent(text: string, settled: PromiseLike<unknown>): void;
}

/** The spans of statements; see the module comment. */
export const statementSpans: StatementSpans = {
  sent(text, settled) {
    const { operation, collection } = describe(text);
    const span = tracer().startSpan(
      collection === undefined ? operation : `${operation} ${collection}`,
      {
        kind: SpanKind.CLIENT,
        attributes: {
          [STATEMENT_ATTRIBUTES.system]: 'postgresql',
          [STATEMENT_ATTRIBUTES.operation]: operation,
          ...(collection === undefined ? {} : { [STATEMENT_ATTRIBUTES.collection]: collection }),
        },
      },
    );
    // The statement's own promise, through Promise's then: postgres.js's
    // would send it again if it had not been, and a rejection handled here
    // is still the caller's to handle.
    void Promise.prototype.then.call(
      settled,
      () => {
        endQuietly(span);
      },
      (err: unknown) => {
        failed(span, err);
        endQuietly(span);
      },
    );
  },
};

const WRITE = /^\s*(insert\s+into|update|delete\s+from)\s+("?[A-Za-z_][A-Za-z0-9_]*"?)/i;
const FIRST_WORD = /^\s*([A-Za-z]+)/;

/**
 * The operation (the statement's first keyword, upper case) and, for an
 * INSERT, UPDATE or DELETE, the table it writes.
 *
 * @param text the statement's first text fragment.
 * @returns what the span is named after.
 */
export function describe(text: string): { operation: string; collection: string | undefined } {
  const write = WRITE.exec(text);
  if (write !== null) {
    const verb = (write[1] ?? '').split(/\s+/)[0] ?? '';
    return { operation: verb.toUpperCase(), collection: (write[2] ?? '').replaceAll('"', '') };
  }
  const word = FIRST_WORD.exec(text)?.[1];
  return { operation: word === undefined ? 'QUERY' : word.toUpperCase(), collection: undefined };
}

/** Ends a span; an application's span processor that throws must not fail a statement. */
function endQuietly(span: Span): void {
  try {
    span.end();
  } catch {
    // Its failure is the SDK's, not the statement's.
  }
}

function failed(span: Span, err: unknown): void {
  const type = errorType(err);
  span.setAttribute(STATEMENT_ATTRIBUTES.errorType, type);
  if (isSqlState(type)) span.setAttribute(STATEMENT_ATTRIBUTES.status, type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type });
}
