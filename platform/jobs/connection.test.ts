import t from 'tap';
import { testDatabase } from '../../test/harness/db.js';
import { createLogger } from '../log/index.js';
import { createWorkerPool, graphileLogger } from './connection.js';

/** A logger whose lines a test can read, and wait for. */
function capture() {
  const lines: Record<string, unknown>[] = [];
  const waiters: { match: (l: Record<string, unknown>) => boolean; resolve: () => void }[] = [];
  const logger = createLogger({
    appName: 'jobs-test',
    level: 'debug',
    stream: {
      write(line: string) {
        const parsed = JSON.parse(line) as Record<string, unknown>;
        lines.push(parsed);
        for (const w of waiters.filter((w) => w.match(parsed))) w.resolve();
      },
    },
  });
  const logged = (match: (l: Record<string, unknown>) => boolean): Promise<void> =>
    new Promise((resolve) => {
      if (lines.some(match)) resolve();
      else waiters.push({ match, resolve });
    });
  return { logger, lines, logged };
}

void t.test(
  'graphile-worker messages reach the process logger at the matching level, without metadata',
  (t) => {
    const { logger, lines } = capture();
    const log = graphileLogger(logger).scope({
      label: 'job',
      workerId: 'w1',
      taskIdentifier: 'a:b',
      jobId: '7',
    });
    const err = new Error('kaput');
    log.error('failed', { error: err, job: { payload: { secret: 'x' } } });
    log.warn('careful');
    log.info('done', { job: { payload: { secret: 'x' } } });
    log.debug('detail');
    t.same(
      lines.map((l) => [l['level'], l['msg']]),
      [
        [50, 'failed'],
        [40, 'careful'],
        [30, 'done'],
        [20, 'detail'],
      ],
    );
    t.match(lines[0], {
      component: 'worker',
      worker_scope: 'job',
      worker_id: 'w1',
      task: 'a:b',
      job_id: '7',
      err: { message: 'kaput' },
    });
    t.notOk(JSON.stringify(lines).includes('secret'), 'job rows and payloads are not logged');
    graphileLogger(undefined).error('dropped');
    t.equal(lines.length, 4, 'no logger, no output');
    t.end();
  },
);

void t.test('an idle connection killed by the server is logged, not a crash', async (t) => {
  const tdb = await testDatabase(t);
  const { logger, logged } = capture();
  const pool = createWorkerPool(tdb.appUrl, { max: 1, applicationName: 'jobs_pool_test', logger });
  t.teardown(() => pool.end());
  const { rows } = await pool.query<{ name: string }>('select current_setting($1) as name', [
    'application_name',
  ]);
  t.same(rows, [{ name: 'jobs_pool_test' }], 'the pool names itself');
  await tdb.app`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'jobs_pool_test'`;
  await logged((l) => l['msg'] === 'worker database connection failed');
  const again = await pool.query<{ one: number }>('select 1 as one');
  t.same(again.rows, [{ one: 1 }], 'the pool reconnects');
});
