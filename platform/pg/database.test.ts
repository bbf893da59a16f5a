import t from 'tap';
import { ConfigError } from '../config/index.js';
import { asksReadWrite } from './client.js';
import { openDatabase, parsePostgresUrl, type DatabaseSettings } from './database.js';

const settings = (url: string, ownerUrl = ''): DatabaseSettings => ({
  url,
  owner_url: ownerUrl,
  embedded_data_dir: '.data/never-used',
  embedded_port: 0,
});

const TWO_HOSTS =
  'postgres://app:pw@127.0.0.1:5432,127.0.0.1:5433/app?target_session_attrs=read-write';

void t.test('a URL with a host list is read the way postgres.js reads it', (t) => {
  const parsed = parsePostgresUrl('database.url', TWO_HOSTS);
  t.same(parsed.hosts, ['127.0.0.1:5432', '127.0.0.1:5433']);
  t.equal(parsed.user, 'app');
  t.equal(parsed.url.pathname, '/app');
  t.equal(parsed.url.searchParams.get('target_session_attrs'), 'read-write');

  const odd = parsePostgresUrl(
    'database.url',
    'postgresql://a%40b:p%2Cw%40x@[::1]:5432,db.example,[::1]/d',
  );
  t.same(odd.hosts, ['[::1]:5432', 'db.example', '[::1]'], 'IPv6 hosts and hosts without a port');
  t.equal(odd.user, 'a@b', 'an encoded @ in the user is no host separator');
  t.equal(
    decodeURIComponent(odd.url.password),
    'p,w@x',
    'nor an encoded comma or @ in the password',
  );

  t.same(parsePostgresUrl('database.url', 'postgres://app@db/app').hosts, ['db'], 'one host');
  t.end();
});

void t.test('what is not a usable postgres URL is refused naming the key', (t) => {
  t.throws(() => parsePostgresUrl('database.url', 'not a url'), {
    message: 'Invalid configuration: database.url is not a URL',
  });
  t.throws(() => parsePostgresUrl('database.owner_url', 'mysql://u@h/d'), {
    message:
      'Invalid configuration: database.owner_url must be a postgres:// URL, got protocol "mysql:"',
  });
  t.throws(() => parsePostgresUrl('database.url', 'postgres://h1/app'), {
    message: 'Invalid configuration: database.url must name a user',
  });
  t.throws(() => parsePostgresUrl('database.url', 'postgres://app@h1,,h2/app'), {
    message: 'Invalid configuration: database.url has an empty entry in its host list "h1,,h2"',
  });
  t.throws(() => parsePostgresUrl('database.url', 'postgres://app@h1,h 2/app'), {
    message: 'Invalid configuration: database.url is not a URL',
  });
  t.end();
});

void t.test('openDatabase takes a host list for the postgres.js pool', async (t) => {
  const target = await openDatabase(settings(TWO_HOSTS, TWO_HOSTS.replace('app:pw', 'own:pw')));
  t.equal(target.appRole, 'app', 'the application role is the URL user');
  t.equal(target.appUrl, TWO_HOSTS, 'the URL is handed to the pool unchanged');
  await target.close();
});

void t.test(
  'a host list where node-postgres connects is refused with one line naming the key',
  async (t) => {
    const refused = await openDatabase(settings(TWO_HOSTS), {
      singleHost: { url: "the worker role's job queue" },
    }).then(
      () => undefined,
      (err: unknown) => err,
    );
    t.type(refused, ConfigError, 'a configuration error: one line, no stack');
    t.equal(
      (refused as Error).message,
      "Invalid configuration: database.url names 2 hosts (127.0.0.1:5432,127.0.0.1:5433), but the worker role's job queue connects with node-postgres, which takes one host: give database.url one address that follows the primary (a virtual IP or a proxy)",
    );
    t.notMatch((refused as Error).message, /pw/, 'the password is not in the message');

    const owner = await openDatabase(settings('postgres://app:pw@db/app', TWO_HOSTS), {
      singleHost: { owner_url: 'migrations' },
    }).then(
      () => undefined,
      (err: unknown) => err,
    );
    t.match((owner as Error).message, /^Invalid configuration: database\.owner_url names 2 hosts/);

    const one = await openDatabase(settings('postgres://app:pw@db:5432/app'), {
      singleHost: { url: "the worker role's job queue" },
    });
    t.equal(one.appRole, 'app', 'one host is accepted');
    await one.close();
  },
);

void t.test('a URL asks for read-write only through its query', (t) => {
  t.ok(asksReadWrite(TWO_HOSTS), 'a host list with read-write');
  t.ok(asksReadWrite('postgres://a@h/d?sslmode=require&target_session_attrs=read-write#x'));
  t.notOk(asksReadWrite('postgres://a@h/d?target_session_attrs=primary'));
  t.notOk(asksReadWrite('postgres://a@h/d?target_session_attrs=read-only'));
  t.notOk(asksReadWrite('postgres://a@h/d'), 'no query');
  t.notOk(
    asksReadWrite('postgres://a@h/d#target_session_attrs=read-write'),
    'a fragment is no query',
  );
  t.notOk(asksReadWrite('postgres://u:p@h/read-write'), 'a path is no query');
  t.notOk(
    asksReadWrite('postgres://u:p@h1,h2/d#?target_session_attrs=read-write'),
    'nor a query inside a fragment, as the driver reads it',
  );
  t.ok(asksReadWrite('postgres://u:p@h1:1,h2:2/d?target_session_attrs=read-write&x=1'));
  t.notOk(asksReadWrite('postgres://u:p@h1/d?target_session_attrs=read%2Fwrite'), 'another value');
  t.end();
});

void t.test('a target_session_attrs postgres.js does not take is refused naming the key', (t) => {
  for (const attrs of ['any', 'READ-WRITE', ' read-write']) {
    t.throws(
      () =>
        parsePostgresUrl('database.url', `postgres://u:p@h1,h2/d?target_session_attrs=${attrs}`),
      {
        message: `Invalid configuration: database.url asks for target_session_attrs "${attrs}"; postgres.js takes read-write, read-only, primary, standby, prefer-standby`,
      },
      attrs,
    );
  }
  for (const attrs of ['read-write', 'read-only', 'primary', 'standby', 'prefer-standby', '']) {
    t.equal(
      parsePostgresUrl('database.url', `postgres://u:p@h/d?target_session_attrs=${attrs}`).user,
      'u',
      attrs,
    );
  }
  t.end();
});
