import t from 'tap';
import {
  assertQueueName,
  assertTaskIdentifier,
  defineCronItem,
  defineTask,
  toParsedCronItems,
  type CronItemDescriptor,
  type TaskDescriptor,
} from './task.js';

const handler = async (): Promise<void> => {};

const cleanup: TaskDescriptor = {
  identifier: 'sync:idempotency_cleanup',
  queue: 'maintenance',
  handler,
};
const cleanupCron: CronItemDescriptor = {
  task: 'sync:idempotency_cleanup',
  pattern: '*/15 * * * *',
  identifier: 'sync:idempotency_cleanup',
  jobKey: 'sync:idempotency_cleanup',
  queueName: 'maintenance',
};

void t.test('a task is module:action in a named queue', (t) => {
  const task = defineTask(cleanup);
  t.same(task, cleanup);
  t.not(task, cleanup, 'a copy');
  t.ok(Object.isFrozen(task), 'frozen, so a module cannot change it after registration');
  t.equal(assertTaskIdentifier('ledger:post_transfer'), 'ledger:post_transfer');
  t.end();
});

void t.test('task identifiers that cron or the module:action rule refuse are refused', (t) => {
  t.throws(
    () => assertTaskIdentifier('sync.idempotency_cleanup'),
    /\^\[_a-zA-Z\]/,
    'a dot breaks crontab',
  );
  for (const bad of [
    'cleanup',
    'a:b:c',
    ':x',
    'sync:',
    'Sync:x',
    '1sync:x',
    'sync:Clean',
    'sync:clean-up',
    `m:${'a'.repeat(127)}`,
  ]) {
    t.throws(() => assertTaskIdentifier(bad), TypeError, JSON.stringify(bad));
  }
  t.throws(() => defineTask({ ...cleanup, identifier: 'nope' }), /module:action/);
  t.end();
});

void t.test('queue names are explicit, short and plain', (t) => {
  t.equal(assertQueueName('maintenance'), 'maintenance');
  t.equal(assertQueueName('ledger:transfers'), 'ledger:transfers');
  for (const bad of ['', 'has space', 'Upper', '-lead', 'q'.repeat(129)]) {
    t.throws(() => assertQueueName(bad), TypeError, JSON.stringify(bad));
  }
  t.throws(() => defineTask({ ...cleanup, queue: '' }), /queue/);
  t.throws(
    () => defineTask({ ...cleanup, handler: 'x' as unknown as TaskDescriptor['handler'] }),
    /handler/,
  );
  t.end();
});

void t.test('a cron item needs a five-field pattern, a plain identifier and a queue', (t) => {
  const item = defineCronItem(cleanupCron);
  t.same(item, cleanupCron);
  t.ok(Object.isFrozen(item));
  t.same(
    defineCronItem({ ...cleanupCron, jobKey: undefined } as unknown as CronItemDescriptor).jobKey,
    undefined,
  );
  for (const pattern of [
    '* * * *',
    '* * * * * *',
    '61 * * * *',
    '* 24 * * *',
    '@hourly',
    '*/0 * * * *',
    '',
  ]) {
    t.throws(() => defineCronItem({ ...cleanupCron, pattern }), /pattern/, JSON.stringify(pattern));
  }
  t.throws(() => defineCronItem({ ...cleanupCron, identifier: 'has.dot' }), /cron item identifier/);
  t.throws(() => defineCronItem({ ...cleanupCron, task: 'sync.cleanup' }), TypeError);
  t.throws(() => defineCronItem({ ...cleanupCron, queueName: 'Bad Queue' }), TypeError);
  t.throws(() => defineCronItem({ ...cleanupCron, jobKey: '' }), /job key/);
  t.throws(() => defineCronItem({ ...cleanupCron, jobKey: 'k'.repeat(513) }), /job key/);
  t.end();
});

void t.test('cron items become graphile cron items with queue, job key and no backfill', (t) => {
  const [parsed, ...rest] = toParsedCronItems([cleanup], [cleanupCron]);
  t.equal(rest.length, 0);
  t.equal(parsed?.task, 'sync:idempotency_cleanup');
  t.equal(parsed?.identifier, 'sync:idempotency_cleanup');
  t.same(parsed?.options, {
    backfillPeriod: 0,
    queueName: 'maintenance',
    jobKey: 'sync:idempotency_cleanup',
    jobKeyMode: 'replace',
  });
  t.ok(parsed?.match({ min: 30, hour: 4, date: 2, month: 3, dow: 1 }), 'fires at minute 30');
  t.notOk(parsed?.match({ min: 31, hour: 4, date: 2, month: 3, dow: 1 }), 'not at minute 31');
  const [noKey] = toParsedCronItems(
    [cleanup],
    [{ ...cleanupCron, jobKey: undefined } as unknown as CronItemDescriptor],
  );
  t.same(
    noKey?.options,
    { backfillPeriod: 0, queueName: 'maintenance' },
    'no job key, no key mode',
  );
  t.end();
});

void t.test('the registry refuses duplicates, unknown tasks and queue mismatches', (t) => {
  t.throws(() => toParsedCronItems([], []), /at least one task/);
  t.throws(() => toParsedCronItems([cleanup, { ...cleanup }], []), /registered twice/);
  t.throws(
    () => toParsedCronItems([cleanup], [cleanupCron, { ...cleanupCron }]),
    /cron item "sync:idempotency_cleanup" is registered twice/,
  );
  t.throws(
    () => toParsedCronItems([cleanup], [{ ...cleanupCron, task: 'sync:other' }]),
    /no task "sync:other"/,
  );
  t.throws(
    () => toParsedCronItems([cleanup], [{ ...cleanupCron, queueName: 'other' }]),
    /runs in queue "maintenance"/,
  );
  t.throws(
    () => toParsedCronItems([{ ...cleanup, identifier: 'bad' }], []),
    /module:action/,
    'plain objects are validated too',
  );
  t.end();
});
