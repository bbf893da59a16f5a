/**
 * The keyed transaction boundary on its own and with the in-memory unit of
 * work: the first transaction opened in a keyed attempt is the key's,
 * another one or a pool statement is refused and remembered, and nothing
 * is refused outside an attempt or after it settled.
 */
import t from 'tap';
import { InMemoryUnitOfWork } from './in-memory.js';
import {
  claimKeyedTransaction,
  keyedTransactionRefusal,
  refuseOutsideKeyedTransaction,
  TransactionEscapeError,
  withinKeyedTransaction,
} from './index.js';

void t.test('outside a keyed attempt nothing is refused', (t) => {
  claimKeyedTransaction('a unit of work');
  claimKeyedTransaction('another unit of work');
  refuseOutsideKeyedTransaction('a pool statement');
  t.equal(keyedTransactionRefusal(), undefined);
  t.end();
});

void t.test('inside one: the first transaction is the key, others are refused', async (t) => {
  await withinKeyedTransaction(async () => {
    claimKeyedTransaction('the key');
    t.throws(
      () => {
        claimKeyedTransaction('a second unit of work');
      },
      {
        name: 'TransactionEscapeError',
        code: 'TRANSACTION_ESCAPE',
        message: /a second unit of work inside a keyed request/,
      },
    );
    t.throws(() => {
      refuseOutsideKeyedTransaction('a pool statement');
    }, TransactionEscapeError);
    t.match(keyedTransactionRefusal()?.message, /a second unit of work/, 'the first is kept');
    await Promise.resolve();
  });
  t.equal(keyedTransactionRefusal(), undefined, 'and not seen outside');
});

void t.test('work left behind by a settled attempt is not refused', async (t) => {
  let later: (() => void) | undefined;
  await withinKeyedTransaction(async () => {
    claimKeyedTransaction('the key');
    later = () => {
      claimKeyedTransaction('a job the handler scheduled');
      refuseOutsideKeyedTransaction('its pool statement');
    };
    await Promise.resolve();
  });
  t.doesNotThrow(() => later?.());
});

void t.test('the in-memory unit of work: a second one inside the attempt is refused', async (t) => {
  const key = new InMemoryUnitOfWork({ retryMax: 1 });
  const other = new InMemoryUnitOfWork({ retryMax: 1 });
  const ran: string[] = [];
  await withinKeyedTransaction(() =>
    key.run(async () => {
      await key.run(() => {
        ran.push('joined');
        return Promise.resolve();
      });
      await t.rejects(
        other.run(() => {
          ran.push('escaped');
          return Promise.resolve();
        }),
        TransactionEscapeError,
      );
    }),
  );
  t.same(ran, ['joined'], 'the second unit of work never ran its function');
  await other.run(() => {
    ran.push('outside');
    return Promise.resolve();
  });
  t.same(ran, ['joined', 'outside'], 'outside an attempt it runs');
});
