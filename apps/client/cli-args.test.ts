/**
 * The command line's arguments: flags and environment read into settings,
 * flags winning, and each bad one refused in one line naming it (exit 2).
 */
import t from 'tap';
import { parseCommandLine, UsageError } from './cli.js';
import { ID_A, ID_B } from './cli-fixture.js';

void t.test('flags and environment become settings; flags win', (t) => {
  const env = {
    CLIENT_OUTBOX: '/tmp/env.sqlite',
    CLIENT_BASE_URL: 'http://127.0.0.1:3999',
    CLIENT_TOKEN: 'env-token',
    CLIENT_KEY_TTL: '12h',
    CLIENT_TIMEOUT: '5s',
  };
  const c = parseCommandLine(
    ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '2500', '--token', 'flag-token'],
    env,
  );
  t.match(c, {
    kind: 'transfer',
    from: ID_A,
    to: ID_B,
    amount: 2500,
    independent: false,
    settings: {
      outbox: '/tmp/env.sqlite',
      baseUrl: 'http://127.0.0.1:3999',
      token: 'flag-token',
      keyTtlMs: 12 * 3_600_000,
      ttlMarginMs: 3_600_000,
      timeoutMs: 5_000,
      waitMs: 30_000,
      retryBaseMs: 200,
      retryCapMs: 30_000,
      concurrency: 4,
      json: false,
    },
  });
  t.match(parseCommandLine(['accounts', 'create', '--name', ' Checking ', '--json'], env), {
    kind: 'accounts-create',
    name: ' Checking ',
    openingBalance: 0,
    settings: { json: true },
  });
  t.match(parseCommandLine(['outbox', 'list', '--state', 'failed', '--outbox', 'x.sqlite'], {}), {
    kind: 'outbox-list',
    state: 'failed',
    settings: { outbox: 'x.sqlite' },
  });
  t.match(parseCommandLine(['outbox', 'drain', '--wait', '0', '--concurrency', '1'], env), {
    kind: 'outbox-drain',
    settings: { waitMs: 0, concurrency: 1 },
  });
  t.same(parseCommandLine(['--help'], {}), { kind: 'help' });
  t.same(parseCommandLine([], {}), { kind: 'help' });
  t.end();
});

void t.test('each bad flag or variable is refused in one line naming it', (t) => {
  const env = { CLIENT_OUTBOX: 'o.sqlite', CLIENT_BASE_URL: 'http://h', CLIENT_TOKEN: 'x' };
  const transfer = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '1'];
  const cases: [string[], Record<string, string>, RegExp][] = [
    [
      ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '0'],
      env,
      /^--amount must be an integer from 1/,
    ],
    [['transfer', '--from', ID_A, '--to', ID_B, '--amount', '1.5'], env, /^--amount/],
    [['transfer', '--from', ID_A, '--to', ID_B, '--amount', '99999999999999999'], env, /^--amount/],
    [['transfer', '--from', 'nope', '--to', ID_B, '--amount', '1'], env, /^--from must be a UUID/],
    [['transfer', '--to', ID_B, '--amount', '1'], env, /^--from is required/],
    [['transfer', '--from', ID_A, '--amount', '1'], env, /^--to is required/],
    [['transfer', '--from', ID_A, '--to', ID_B], env, /^--amount is required/],
    [
      [...transfer, '--key', '0190f2a4-1b2c-4d3e-8f40-123456789abc'],
      env,
      /^--key must be a UUIDv7/,
    ],
    [[...transfer, '--frm', 'x'], env, /^unknown flag --frm/],
    [[...transfer, '--amount'], env, /^--amount needs a value/],
    [[...transfer, 'extra'], env, /^unexpected argument "extra"/],
    [[...transfer, '--state', 'done'], env, /^--state does not belong to "transfer"/],
    [transfer, { ...env, CLIENT_OUTBOX: '' }, /^--outbox or CLIENT_OUTBOX is required/],
    [transfer, { ...env, CLIENT_TOKEN: '' }, /^--token or CLIENT_TOKEN is required/],
    [
      transfer,
      { ...env, CLIENT_BASE_URL: 'ftp://h' },
      /^CLIENT_BASE_URL must be an http or https origin/,
    ],
    [
      [...transfer, '--base-url', 'http://h/api'],
      env,
      /^--base-url must be an http or https origin/,
    ],
    [
      [...transfer, '--base-url', 'http://user:pw@h'],
      env,
      /^--base-url must not carry a user name or password/,
    ],
    // A token file saved with a Windows line end keeps its CR; the token
    // itself is never echoed.
    [
      transfer,
      { ...env, CLIENT_TOKEN: 'secret-tok\r' },
      /^CLIENT_TOKEN must be printable ASCII without spaces \(a bearer token\); it holds a carriage return or line feed \(a token file saved with a Windows line end\?\)$/,
    ],
    [
      [...transfer, '--token', 'secret tok'],
      env,
      /^--token must be printable ASCII without spaces \(a bearer token\); it holds a space or a character outside ASCII$/,
    ],
    [
      [...transfer, '--token', 'sécret'],
      env,
      /^--token must be printable ASCII without spaces \(a bearer token\); it holds a space or a character outside ASCII$/,
    ],
    [[...transfer, '--amount', '6'], env, /^--amount is given twice: give it once$/],
    [[...transfer, '--json', '--json'], env, /^--json is given twice: give it once$/],
    [transfer, { ...env, CLIENT_KEY_TTL: '24 hours' }, /^CLIENT_KEY_TTL must be a duration/],
    [[...transfer, '--key-ttl', '0s'], env, /^--key-ttl must be a duration of at least 1ms/],
    [
      [...transfer, '--key-ttl', '24h', '--ttl-margin', '24h'],
      env,
      /^--ttl-margin \(24h\) must be less than --key-ttl \(24h\)/,
    ],
    [
      [...transfer, '--ttl-margin', '1s', '--timeout', '1s'],
      env,
      /^--timeout \(1s\) must be less than --ttl-margin/,
    ],
    [transfer, { ...env, CLIENT_WAIT: '-1s' }, /^CLIENT_WAIT must be a duration/],
    // Timers hold at most 2^31 - 1 ms: a longer one fires after 1 ms.
    [
      [...transfer, '--key-ttl', '40d', '--ttl-margin', '30d', '--timeout', '25d'],
      env,
      /^--timeout must be a duration of at most 24d, got "25d"/,
    ],
    [[...transfer, '--wait', '25d'], env, /^--wait must be a duration of at most 24d/],
    [[...transfer, '--retry-cap', '25d'], env, /^--retry-cap must be a duration of at most 24d/],
    [
      [...transfer, '--outbox', 'file:o.sqlite?nolock=1'],
      env,
      /^--outbox must be a file path, not a file: URI/,
    ],
    [
      transfer,
      { ...env, CLIENT_CONCURRENCY: '0' },
      /^CLIENT_CONCURRENCY must be an integer from 1 to 64/,
    ],
    [
      [...transfer, '--retry-base', '10s', '--retry-cap', '1s'],
      env,
      /^--retry-base \(10s\) must not exceed --retry-cap/,
    ],
    [['accounts', 'create'], env, /^--name is required/],
    [
      ['accounts', 'create', '--name', '   '],
      env,
      /^--name must be 1 to 100 characters, not blank/,
    ],
    [
      ['accounts', 'create', '--name', 'x', '--opening-balance=-1'],
      env,
      /^--opening-balance must be an integer from 0/,
    ],
    [['accounts', 'delete'], env, /^unknown command "accounts delete"/],
    [['outbox', 'list', '--state', 'lost'], env, /^--state must be one of pending, done, failed/],
    [['outbox'], env, /^unknown command "outbox"/],
    [['send'], env, /^unknown command "send"/],
  ];
  for (const [argv, e, message] of cases) {
    t.throws(() => parseCommandLine(argv, e), { name: 'UsageError', message }, argv.join(' '));
    try {
      parseCommandLine(argv, e);
    } catch (err) {
      t.notOk((err as Error).message.includes('\n'), 'one line');
    }
  }
  t.ok(new UsageError('x') instanceof Error);
  t.end();
});
