import t from 'tap';
import { newRequestContext, runWithContext } from '../context/index.js';
import {
  markOneTimeSecret,
  oneTimeSecretMarked,
  clearOneTimeSecret,
  RequestInProgressError,
  isRequestInProgress,
} from './index.js';

void t.test('the one-time-secret marker lives in the request context', async (t) => {
  t.equal(oneTimeSecretMarked(), false, 'outside a request nothing is marked');
  t.throws(() => {
    markOneTimeSecret();
  }, /request context/);
  const ctx = newRequestContext('c-1');
  await runWithContext(ctx, async () => {
    t.equal(oneTimeSecretMarked(), false);
    await Promise.resolve();
    markOneTimeSecret();
    t.equal(oneTimeSecretMarked(), true, 'seen after an await in the same request');
    clearOneTimeSecret();
    t.equal(oneTimeSecretMarked(), false, 'a retried attempt starts unmarked');
  });
  await runWithContext(newRequestContext('c-2'), () => {
    t.equal(oneTimeSecretMarked(), false, 'another request is not marked');
    return Promise.resolve();
  });
});

void t.test('RequestInProgressError is recognisable', (t) => {
  const e = new RequestInProgressError();
  t.ok(isRequestInProgress(e));
  t.notOk(isRequestInProgress(new Error('x')));
  t.equal(e.name, 'RequestInProgressError');
  t.end();
});
