/**
 * The plugin's spans and the statements' reach whichever tracer provider
 * is registered when they are made: one registered after an earlier one
 * was shut down (an application that restarts its SDK, or its tests) gets
 * them, not the first.
 */
import t from 'tap';
import { STATEMENT_TRACER } from '../../pg/statement-spans.js';
import { recordSpans } from '../../../test/harness/tracing.js';
import { inSpan } from './tracing.js';
import { statementSpans } from '../../pg/statement-spans.js';

for (const round of ['first', 'second']) {
  void t.test(`the ${round} provider gets the spans made while it is registered`, async (t) => {
    const recorder = recordSpans(t);
    await inSpan(`plugin ${round}`, {}, async () => {
      statementSpans.sent('select 1', Promise.resolve());
      await Promise.resolve();
    });
    await new Promise((r) => setImmediate(r));
    const names = recorder.spans().map((s) => [s.instrumentationScope.name, s.name]);
    t.same(
      names.sort(),
      [
        [STATEMENT_TRACER, 'SELECT'],
        ['fastify-idempotency', `plugin ${round}`],
      ].sort(),
    );
  });
}
