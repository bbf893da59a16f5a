import t from 'tap';
import { parseCommandLine, UsageError } from './cli.js';

void t.test('defaults to serving every role without migrating', (t) => {
  t.same(parseCommandLine([]), {
    kind: 'serve',
    role: 'all',
    configPath: undefined,
    migrate: false,
  });
  t.end();
});

void t.test('reads role, config and migrate', (t) => {
  t.same(parseCommandLine(['--role', 'api', '--config', 'c.json', '--migrate']), {
    kind: 'serve',
    role: 'api',
    configPath: 'c.json',
    migrate: true,
  });
  t.same(parseCommandLine(['serve', '--role=worker']), {
    kind: 'serve',
    role: 'worker',
    configPath: undefined,
    migrate: false,
  });
  t.end();
});

void t.test('migrate command', (t) => {
  t.same(parseCommandLine(['migrate', '--config', 'x.json']), {
    kind: 'migrate',
    configPath: 'x.json',
  });
  t.throws(() => parseCommandLine(['migrate', '--role', 'api']), UsageError);
  t.end();
});

void t.test('help', (t) => {
  t.same(parseCommandLine(['--help']), { kind: 'help' });
  t.end();
});

void t.test('refuses bad input with the usage text, naming the problem', (t) => {
  const cases: [string[], RegExp][] = [
    [['--rol', 'api'], /Unknown option '--rol'/],
    [['--role', 'boss'], /--role must be one of api, worker, all, got "boss"/],
    [['--role'], /--role/],
    [['launch'], /Unknown command "launch"/],
    [['serve', 'extra'], /Unexpected argument "extra"/],
    [['--config='], /--config needs a file path/],
  ];
  for (const [argv, message] of cases) {
    const err = t.throws(() => parseCommandLine(argv)) as Error;
    t.type(err, UsageError, argv.join(' '));
    t.match(err.message, message, argv.join(' '));
    t.match(err.message, /Usage:/, 'includes the usage');
  }
  t.end();
});

void t.test('principal create', (t) => {
  t.same(parseCommandLine(['principal', 'create', '--name', ' Ada ']), {
    kind: 'principal-create',
    configPath: undefined,
    name: 'Ada',
    principalKind: 'user',
  });
  t.same(parseCommandLine(['principal', 'create', '--name', 'Export', '--kind', 'service']), {
    kind: 'principal-create',
    configPath: undefined,
    name: 'Export',
    principalKind: 'service',
  });
  const bad: [string[], RegExp][] = [
    [['principal', 'create'], /--name must be 1 to 200 characters/],
    [['principal', 'create', '--name', 'x'.repeat(201)], /--name must be 1 to 200/],
    [
      ['principal', 'create', '--name', 'a', '--kind', 'robot'],
      /--kind must be user or service, got "robot"/,
    ],
    [['principal', 'delete', '--name', 'a'], /Expected "principal create"/],
    [['principal', 'create', '--name', 'a', '--role', 'api'], /takes --name, --kind and --config/],
    [['--name', 'a'], /--name and --kind belong to "principal create"/],
  ];
  for (const [argv, message] of bad) {
    t.throws(() => parseCommandLine(argv), message, argv.join(' '));
  }
  t.end();
});
