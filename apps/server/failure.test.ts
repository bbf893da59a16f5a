import t from 'tap';
import { ConfigError } from '../../platform/config/index.js';
import { ServerVersionError } from '../../platform/pg/client.js';
import { EmbeddedStartError } from '../../platform/pg/embedded.js';
import { testDatabase } from '../../test/harness/db.js';
import { UsageError } from './cli.js';
import { describeFailure, EXIT_FAILURE, EXIT_USAGE } from './failure.js';

const embedded = { databaseUrl: undefined, httpPort: undefined };
const external = { databaseUrl: 'postgres://app:pw@db.example:6543/app', httpPort: 3000 };

void t.test('usage and configuration errors exit 2 with their message', (t) => {
  const usage = describeFailure(new UsageError('--role must be one of api'), embedded);
  t.same(usage, { text: '--role must be one of api\n', exitCode: EXIT_USAGE, expected: true });
  const config = describeFailure(
    new ConfigError([{ key: 'http.port', source: 'default', message: 'http.port is bad' }]),
    embedded,
  );
  t.same(config, {
    text: 'Invalid configuration: http.port is bad\n',
    exitCode: EXIT_USAGE,
    expected: true,
  });
  t.end();
});

void t.test('what a real PostgreSQL answers is named in one line', async (t) => {
  const db = await testDatabase(t);
  const missing = await db.app`select * from no_such_table`.then(
    () => undefined,
    (err: unknown) => err,
  );
  const report = describeFailure(missing, external);
  t.equal(report.exitCode, EXIT_FAILURE);
  t.ok(report.expected);
  t.match(
    report.text,
    /^the database has no schema yet \(relation "no_such_table" does not exist\): run "migrate" first \(make migrate\)\n$/,
  );
  t.equal(
    describeFailure(
      Object.assign(new Error('database "x" does not exist'), { code: '3D000' }),
      external,
    ).text,
    'PostgreSQL at db.example:6543 (database.url): database "x" does not exist\n',
  );
  t.equal(
    describeFailure(
      Object.assign(new Error('terminating connection due to administrator command'), {
        code: '57P01',
      }),
      embedded,
    ).text,
    'the embedded PostgreSQL is shutting down or starting up (terminating connection due to administrator command): try again in a moment\n',
  );
  t.equal(
    describeFailure(
      Object.assign(new Error('password authentication failed'), { code: '28P01' }),
      external,
    ).text,
    'PostgreSQL at db.example:6543 refused the credentials (database.url or database.owner_url): password authentication failed\n',
  );
  t.equal(
    describeFailure(
      new EmbeddedStartError('embedded PostgreSQL did not start: x\nlog tail'),
      embedded,
    ).text,
    'embedded PostgreSQL did not start: x\nlog tail\n',
    'the log tail is kept, without a stack',
  );
  t.equal(
    describeFailure(new ServerVersionError(16), embedded).text,
    'PostgreSQL 17 or newer is required (transaction_timeout); the server is version 16\n',
  );
  t.equal(
    describeFailure(
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
      embedded,
    ).text,
    'cannot reach the embedded PostgreSQL: connect ECONNREFUSED\n',
  );
  t.equal(
    describeFailure(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), {
      databaseUrl:
        'postgres://app:pw@10.0.0.1:5432,10.0.0.2:5433/app?target_session_attrs=read-write',
      httpPort: 3000,
    }).text,
    'cannot reach PostgreSQL at 10.0.0.1:5432,10.0.0.2:5433 (database.url): connect ECONNREFUSED\n',
    'a host list is named whole',
  );
  t.equal(
    describeFailure(Object.assign(new Error('listen EADDRINUSE'), { code: 'EADDRINUSE' }), embedded)
      .text,
    'an address is in use: listen EADDRINUSE\n',
  );
  const inUse = (port: number) =>
    Object.assign(new Error(`listen EADDRINUSE 127.0.0.1:${String(port)}`), {
      code: 'EADDRINUSE',
      port,
    });
  const ports = { databaseUrl: undefined, httpPort: 3000, metricsPort: 9100 };
  t.equal(
    describeFailure(inUse(3000), ports).text,
    'http.port 3000 is in use by another process: stop it, or set HTTP__PORT\n',
  );
  t.equal(
    describeFailure(inUse(9100), ports).text,
    'metrics.port 9100 is in use by another process: stop it, or set METRICS__PORT\n',
  );
  t.equal(
    describeFailure(inUse(5432), ports).text,
    'an address is in use: listen EADDRINUSE 127.0.0.1:5432\n',
  );
});

void t.test('anything else is a bug and keeps its stack', (t) => {
  const bug = new TypeError('x is not a function');
  const report = describeFailure(bug, embedded);
  t.same(report, { text: `${bug.stack ?? ''}\n`, exitCode: EXIT_FAILURE, expected: false });
  t.same(describeFailure('a string', embedded), {
    text: 'a string\n',
    exitCode: EXIT_FAILURE,
    expected: false,
  });
  t.equal(
    describeFailure(Object.assign(new Error('odd'), { code: 'XX000' }), embedded).expected,
    false,
  );
  t.equal(describeFailure(null, embedded).expected, false);
  t.end();
});
