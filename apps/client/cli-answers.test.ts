/**
 * How the command line prints what an intent met, run in this process
 * against real outbox files and a real HTTP server on 127.0.0.1 that
 * scripts its answers: an attempt cut off before its answer, unmarked
 * refusals after a lost attempt (an unknown outcome), and a 2xx whose body
 * is not the JSON object this API answers.
 */
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { EXIT, runCli } from './cli.js';
import { ID_A, ID_B, io, tempDir } from './cli-fixture.js';
import { Outbox } from './outbox.js';

/**
 * A server on 127.0.0.1 that answers each request when its body has
 * arrived, with `answer`; closed at teardown.
 *
 * @returns the command line's environment for it and a fresh outbox.
 */
async function scriptedServer(
  t: Test,
  answer: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<Record<string, string>> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      answer(req, res);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as net.AddressInfo;
  return {
    CLIENT_OUTBOX: path.join(await tempDir(t), 'outbox.sqlite'),
    CLIENT_BASE_URL: `http://127.0.0.1:${String(port)}`,
    CLIENT_TOKEN: 'tok',
  };
}

void t.test('outbox list names an attempt cut off before its answer', async (t) => {
  const file = path.join(await tempDir(t), 'outbox.sqlite');
  const outbox = Outbox.open(file);
  const { intent } = outbox.enqueue({
    operation: 'createTransfer',
    method: 'POST',
    path: '/api/v1/transfers',
    body: { from_account_id: ID_A, to_account_id: ID_B, amount: 1 },
    lanes: [],
  });
  outbox.close();
  // What a process killed during its first attempt leaves behind.
  const db = new DatabaseSync(file);
  db.exec(`update intents set attempts = 1, attempt_started_at = ${String(Date.now())}`);
  db.close();
  const human = io();
  t.equal(await runCli(['outbox', 'list'], { CLIENT_OUTBOX: file }, human), EXIT.ok);
  t.match(
    human.out(),
    new RegExp(
      `pending\\s+createTransfer ${intent.key} .*pending \\(attempts 1, the last cut off before its answer: it may have reached the server\\)`,
    ),
  );
  const machine = io();
  await runCli(['outbox', 'list', '--json'], { CLIENT_OUTBOX: file }, machine);
  t.match(JSON.parse(machine.out()), {
    intents: [{ key: intent.key, attempts: 1, attempt_started_at: /^\d{4}-/ }],
  });
});

void t.test(
  'unmarked refusals after a lost attempt are reported as an unknown outcome',
  async (t) => {
    let posts = 0;
    const env = await scriptedServer(t, (req, res) => {
      if (req.url === '/api/v1/me') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'p1' }));
        return;
      }
      posts += 1;
      // The first attempt is lost on the way back; the repeats meet a
      // gateway's 404, which carries no Idempotent-Replay (an
      // unmarked answer is repeated once, so two of them).
      if (posts === 1) {
        res.socket?.destroy();
        return;
      }
      res.writeHead(404, { 'content-type': 'application/problem+json' });
      res.end(JSON.stringify({ code: 'not_found', detail: 'no route (gateway)' }));
    });
    const o = io();
    const argv = ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5'];
    const code = await runCli([...argv, '--retry-base', '1ms', '--retry-cap', '1ms'], env, o);
    t.equal(code, EXIT.failed, o.err());
    t.equal(posts, 3, 'repeated once after the first unmarked answer, not after the second');
    t.match(
      o.out(),
      /^transfer [0-9a-f-]{36}: FAILED: outcome unknown: 404 not_found: no route \(gateway\) without Idempotent-Replay, so not the key's stored answer .*an attempt may have taken effect: check the balances of both accounts \(GET \/api\/v1\/accounts\/\{id\}\) before stating it again as a new intent/,
    );
    const listed = io();
    await runCli(['outbox', 'list', '--json'], env, listed);
    t.match(JSON.parse(listed.out()), {
      intents: [
        {
          state: 'failed',
          failure: 'outcome_unknown',
          attempts: 3,
          answer: { status: 404, replayed: false, marked: false },
        },
      ],
    });
    const human = io();
    await runCli(['outbox', 'list'], env, human);
    t.match(human.out(), /failed\s+createTransfer .*outcome unknown: 404 not_found/);
  },
);

void t.test('a 2xx whose body is null or not JSON is printed, not a crash', async (t) => {
  const bodies = ['null', 'not json', '[1]'];
  const env = await scriptedServer(t, (req, res) => {
    if (req.url === '/api/v1/me') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'p1' }));
      return;
    }
    res.writeHead(201, { 'content-type': 'application/json', 'idempotent-replay': 'false' });
    res.end(bodies.shift() ?? '{}');
  });
  for (const [i, argv] of [
    ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '5'],
    ['accounts', 'create', '--name', 'N'],
    ['transfer', '--from', ID_A, '--to', ID_B, '--amount', '6'],
  ].entries()) {
    const o = io();
    const code = await runCli(argv, env, o);
    t.equal(code, EXIT.ok, `answer ${String(i)}: ${o.err()}`);
    t.notMatch(o.err(), /a bug/);
    t.match(o.out(), /201.*not the JSON object this API answers/);
  }
});

void t.test(
  "a server's principal id reaches the terminal escaped when it is not the outbox's",
  async (t) => {
    // The first drain binds the outbox to p1; the second meets an id that
    // would wipe the line and print a reassurance of its own.
    const ids = ['p1', 'p2\r\u001b[2K\u001b[1Aclient: ok, nothing to worry about\u001b[8m'];
    const env = await scriptedServer(t, (req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: ids.shift() ?? 'p3' }));
    });
    t.equal(await runCli(['outbox', 'drain'], env, io()), EXIT.ok);
    const o = io();
    t.equal(await runCli(['outbox', 'drain'], env, o), EXIT.outbox);
    // Matching control characters is the assertion's purpose.
    // eslint-disable-next-line no-control-regex
    t.notMatch(o.err(), /[\u0000-\u0009\u000b-\u001f]/, 'no control character but line ends');
    t.match(o.err(), /belongs to principal p1; .*p2\\u000d\\u001b\[2K/, 'shown escaped');
  },
);
