import net from 'node:net';
import t, { type Test } from 'tap';
import { testDatabase } from '../../test/harness/db.js';
import { startServerProcess } from '../../test/harness/process.js';
import { installWorkerSchema } from '../../platform/jobs/index.js';

/** A port on 127.0.0.1 another listener holds until the test ends. */
async function takenPort(t: Test): Promise<number> {
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        blocker.close(() => {
          resolve();
        });
      }),
  );
  return (blocker.address() as net.AddressInfo).port;
}

void t.test('a bad configuration value stops start-up naming the key', async (t) => {
  const p = startServerProcess(['--role', 'api'], { HTTP__PORT: 'abc' });
  t.equal(await p.exited, 2);
  t.match(p.stderr(), /http\.port = "abc" \(from environment HTTP__PORT\)/);
});

void t.test('an unknown flag is refused with the usage', async (t) => {
  const p = startServerProcess(['--rol', 'api'], {});
  t.equal(await p.exited, 2);
  t.match(p.stderr(), /Unknown option '--rol'/);
  t.match(p.stderr(), /Usage:/);
});

void t.test(
  'a database.url with a host list: the api role starts on it; the worker role and migrations refuse it in one line',
  async (t) => {
    const db = await testDatabase(t);
    // The first host refuses connections; postgres.js moves on to the next.
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedPort = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => {
      closed.close(() => {
        resolve();
      });
    });
    const one = new URL(db.appUrl);
    const hosts = `127.0.0.1:${String(closedPort)},${one.host}`;
    const list = `postgres://${one.username}:${one.password}@${hosts}${one.pathname}?target_session_attrs=read-write`;

    const api = startServerProcess(['--role', 'api'], { DATABASE__URL: list, HTTP__PORT: '0' });
    t.teardown(() => api.child.kill('SIGKILL'));
    const listening = await api.waitForLine((l) => l['msg'] === 'listening');
    const res = await fetch(`${listening['address'] as string}/readyz`);
    t.equal(res.status, 200, 'the api role reached PostgreSQL through the host list');
    api.child.kill('SIGTERM');
    t.equal(await api.exited, 0);

    const refusal = (key: string, who: string): string =>
      `Invalid configuration: ${key} names 2 hosts (${hosts}), but ${who} connects with node-postgres, which takes one host: give ${key} one address that follows the primary (a virtual IP or a proxy)\n`;
    for (const role of ['worker', 'all']) {
      const p = startServerProcess(['--role', role], { DATABASE__URL: list, HTTP__PORT: '0' });
      t.equal(await p.exited, 2, `role ${role} is refused as a configuration error`);
      t.equal(p.stderr(), refusal('database.url', `the ${role} role's job queue`), 'in one line');
    }
    const migrate = startServerProcess(['migrate'], {
      DATABASE__URL: db.appUrl,
      DATABASE__OWNER_URL: list,
      LOG__LEVEL: 'fatal',
    });
    t.equal(await migrate.exited, 2, 'migrate is refused as a configuration error');
    t.equal(migrate.stderr(), refusal('database.owner_url', 'migrations'), 'in one line');
  },
);

void t.test('migrate needs the owner URL when the database URL is set', async (t) => {
  const db = await testDatabase(t);
  const p = startServerProcess(['migrate'], { DATABASE__URL: db.appUrl, LOG__LEVEL: 'warn' });
  t.equal(await p.exited, 2);
  t.match(p.stderr(), /database\.owner_url/);
});

void t.test(
  'migrate applies migrations as the owner and exits 0 (a re-run is a no-op)',
  async (t) => {
    const db = await testDatabase(t);
    const env = { DATABASE__URL: db.appUrl, DATABASE__OWNER_URL: db.ownerUrl, LOG__LEVEL: 'info' };
    const first = startServerProcess(['migrate'], env);
    t.equal(await first.exited, 0, first.stderr());
    t.ok(first.lines.some((l) => l['msg'] === 'migrations applied'));
    const again = startServerProcess(['migrate'], env);
    t.equal(await again.exited, 0, again.stderr());
  },
);

void t.test('role api listens, answers readyz and stops cleanly on SIGTERM', async (t) => {
  const db = await testDatabase(t);
  const p = startServerProcess(['--role', 'api'], { DATABASE__URL: db.appUrl, HTTP__PORT: '0' });
  const listening = await p.waitForLine((l) => l['msg'] === 'listening');
  t.notOk(
    p.lines.some((l) => l['msg'] === 'jobs started'),
    'the api role runs no jobs',
  );
  const address = listening['address'] as string;
  const res = await fetch(`${address}/readyz`);
  t.equal(res.status, 200);
  p.child.kill('SIGTERM');
  t.equal(await p.exited, 0);
  t.ok(p.lines.some((l) => l['msg'] === 'stopped'));
});

void t.test(
  'role worker runs module tasks and cron, does not listen, and stops cleanly on SIGINT',
  async (t) => {
    const db = await testDatabase(t);
    await installWorkerSchema(db.ownerUrl, db.state.app.name);
    const p = startServerProcess(['--role', 'worker'], {
      DATABASE__URL: db.appUrl,
      HTTP__PORT: '0',
    });
    await p.waitForLine((l) => l['msg'] === 'started');
    t.ok(
      p.lines.some((l) => l['msg'] === 'jobs started'),
      'the worker role runs jobs',
    );
    t.notOk(
      p.lines.some((l) => l['msg'] === 'listening'),
      'no listener in the worker role',
    );
    // graphile-worker records its cron items as the cron starts, which may
    // finish just after it says so: read until a deadline, not once.
    const deadline = Date.now() + 10_000;
    let crons: { identifier: string }[] = [];
    do {
      crons = await db.owner<{ identifier: string }[]>`
      select identifier from graphile_worker._private_known_crontabs`;
      if (crons.length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    } while (Date.now() < deadline);
    t.same(
      crons.map((c) => c.identifier),
      ['sync:idempotency_cleanup'],
      'the cleanup cron item is registered',
    );
    // A job queued from SQL (as add_job in any transaction would) is run by the worker process.
    await db.owner`select graphile_worker.add_job('sync:idempotency_cleanup', queue_name => 'maintenance')`;
    const ran = await p.waitForLine((l) => /idempotency cleanup completed/.test(String(l['msg'])));
    t.match(String(ran['msg']), /0 rows deleted/);
    p.child.kill('SIGINT');
    t.equal(await p.exited, 0);
  },
);

void t.test(
  'a worker whose metrics port is taken stops before taking any job, and says why in the log',
  async (t) => {
    const db = await testDatabase(t);
    await installWorkerSchema(db.ownerUrl, db.state.app.name);
    const port = await takenPort(t);
    const p = startServerProcess(['--role', 'worker'], {
      DATABASE__URL: db.appUrl,
      METRICS__PORT: String(port),
    });
    t.equal(await p.exited, 1);
    t.notOk(
      p.lines.some((l) => l['msg'] === 'jobs started'),
      'no job was taken',
    );
    t.ok(
      p.lines.some(
        (l) =>
          l['msg'] === 'start-up failed' &&
          l['reason'] ===
            `metrics.port ${String(port)} is in use by another process: stop it, or set METRICS__PORT`,
      ),
      'the structured log names the cause and the key',
    );
  },
);

void t.test('role api with metrics.listener own serves metrics on a port of its own', async (t) => {
  const db = await testDatabase(t);
  const p = startServerProcess(['--role', 'api'], {
    DATABASE__URL: db.appUrl,
    HTTP__PORT: '0',
    METRICS__LISTENER: 'own',
    METRICS__PORT: '0',
  });
  t.teardown(() => p.child.kill('SIGKILL'));
  const metricsLine = await p.waitForLine((l) => l['msg'] === 'metrics listening');
  const api = await p.waitForLine((l) => l['msg'] === 'listening');
  const own = String(metricsLine['address']);
  t.not(own, api['address'], 'another address than the API');
  t.equal((await fetch(`${own}/metrics`)).status, 200, 'metrics there');
  t.equal((await fetch(`${String(api['address'])}/metrics`)).status, 404, 'not on the API');
  p.child.kill('SIGTERM');
  t.equal(await p.exited, 0);
});

void t.test('expected failures of the command line are one line, without a stack', async (t) => {
  const db = await testDatabase(t);
  const closed = net.createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const closedPort = (closed.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => {
    closed.close(() => {
      resolve();
    });
  });

  const unreachable = startServerProcess(['principal', 'create', '--name', 'X'], {
    DATABASE__URL: `postgres://app:secret@127.0.0.1:${String(closedPort)}/app`,
  });
  t.equal(await unreachable.exited, 1);
  t.match(
    unreachable.stderr(),
    new RegExp(
      `^cannot reach PostgreSQL at 127\\.0\\.0\\.1:${String(closedPort)} \\(database\\.url\\): .*ECONNREFUSED.*\\n$`,
    ),
  );

  const url = new URL(db.appUrl);
  url.password = 'wrong';
  const refused = startServerProcess(['migrate'], {
    DATABASE__URL: url.href,
    DATABASE__OWNER_URL: url.href,
    LOG__LEVEL: 'fatal',
  });
  t.equal(await refused.exited, 1);
  t.match(
    refused.stderr(),
    /^PostgreSQL at 127\.0\.0\.1:\d+ refused the credentials \(database\.url or database\.owner_url\): .+\n$/,
  );

  const port = await takenPort(t);
  const taken = startServerProcess(['--role', 'api'], {
    DATABASE__URL: db.appUrl,
    HTTP__PORT: String(port),
  });
  t.equal(await taken.exited, 1);
  t.equal(
    taken.stderr(),
    `http.port ${String(port)} is in use by another process: stop it, or set HTTP__PORT\n`,
  );
  const fatal = taken.lines.find((l) => l['msg'] === 'start-up failed');
  t.equal(
    fatal?.['reason'],
    `http.port ${String(port)} is in use by another process: stop it, or set HTTP__PORT`,
  );
  t.notOk(JSON.stringify(fatal).includes('    at '), 'the log line carries no stack either');
});
