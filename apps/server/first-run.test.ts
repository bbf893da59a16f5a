import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { isUuidV7, newId } from '../../kernel/ids/index.js';
import { startTestApp, type TestApp } from '../../test/harness/app.js';
import {
  ensureLocalPrincipal,
  firstRunBanner,
  LOCAL_PRINCIPAL_FILE,
  LOCAL_PRINCIPAL_NAME,
  localPrincipalFile,
  newQuickstartKeys,
  QUICKSTART_AMOUNTS,
  quickstartScript,
  shellWord,
  type LocalPrincipalDeps,
} from './first-run.js';

async function setup(t: Test): Promise<{ k: TestApp; deps: LocalPrincipalDeps }> {
  const k = await startTestApp(t);
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'first-run-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return { k, deps: { identity: k.app.identity, clock: k.clock, file: localPrincipalFile(dir) } };
}

void t.test('localPrincipalFile lives in the embedded data directory', (t) => {
  t.equal(localPrincipalFile('/srv/data/pg'), `/srv/data/pg/${LOCAL_PRINCIPAL_FILE}`);
  t.equal(
    localPrincipalFile('.data/pg'),
    path.join(process.cwd(), '.data/pg', LOCAL_PRINCIPAL_FILE),
  );
  t.end();
});

void t.test('the quickstart sequence uses the given address, token and keys', (t) => {
  const keys = newQuickstartKeys({ now: () => new Date('2026-06-01T10:00:00Z') });
  t.ok(
    [keys.accountA, keys.accountB, keys.transfer].every((k) => isUuidV7(k)),
    'UUIDv7 keys',
  );
  t.equal(new Set([keys.accountA, keys.accountB, keys.transfer]).size, 3);
  const script = quickstartScript({
    baseUrl: 'http://127.0.0.1:4321',
    tokenFile: '/srv/pg/local-principal.json',
    keys,
  });
  t.match(script, /^# 1\. /);
  t.ok(
    script.includes(
      `\nBASE=http://127.0.0.1:4321\nTOKEN=$(sed -E 's/.*"token":"([^"]+)".*/\\1/' /srv/pg/local-principal.json)\n`,
    ),
    'the token is read from its file',
  );
  t.equal(script.split(`Idempotency-Key: ${keys.accountA}'`).length, 2);
  t.equal(script.split(`Idempotency-Key: ${keys.accountB}'`).length, 2);
  t.equal(script.split(`Idempotency-Key: ${keys.transfer}'`).length, 3, 'the transfer twice');
  const { openingA, openingB, transfer } = QUICKSTART_AMOUNTS;
  t.match(script, `"opening_balance":${String(openingA)}`);
  t.match(script, `"opening_balance":${String(openingB)}`);
  t.match(script, `A holds ${String(openingA - transfer)}, B holds ${String(openingB + transfer)}`);
  t.ok(script.endsWith('\n'));
  t.end();
});

void t.test('a token file path is quoted for the shell only when it must be', (t) => {
  t.equal(shellWord('/srv/data/pg/local-principal.json'), '/srv/data/pg/local-principal.json');
  t.equal(shellWord('/home/a b/x.json'), "'/home/a b/x.json'");
  t.equal(shellWord("/tmp/it's/x.json"), "'/tmp/it'\\''s/x.json'");
  t.equal(shellWord('/tmp/$HOME/x'), "'/tmp/$HOME/x'");
  t.end();
});

void t.test('the first run creates the principal; later runs reuse it', async (t) => {
  const { k, deps } = await setup(t);
  const first = await ensureLocalPrincipal(deps);
  if (first.kind !== 'created') throw new Error(`created expected, got ${first.kind}`);
  const info = await k.app.identity.directory.find(first.principalId);
  t.equal(info?.displayName, LOCAL_PRINCIPAL_NAME);
  t.equal(info?.kind, 'user');
  const stat = await fs.stat(deps.file);
  t.equal(stat.mode & 0o777, 0o600, 'the token file is private');
  t.same(JSON.parse(await fs.readFile(deps.file, 'utf8')), {
    principal_id: first.principalId,
    token: first.token,
  });
  t.same(
    (await fs.readdir(path.dirname(deps.file))).sort(),
    [LOCAL_PRINCIPAL_FILE],
    'no leftovers',
  );
  const actor = await k.app.identity.authenticator.authenticate(first.token, k.clock.now());
  t.equal(actor?.principalId, first.principalId, 'the token authenticates');

  const again = await ensureLocalPrincipal(deps);
  t.same(again, { kind: 'saved', principalId: first.principalId, token: first.token });
});

void t.test('a saved principal the directory does not know is replaced', async (t) => {
  const { k, deps } = await setup(t);
  const gone = { principal_id: newId(), token: 'tok_aaaaaaaa.unknown' };
  await fs.writeFile(deps.file, JSON.stringify(gone));
  const local = await ensureLocalPrincipal(deps);
  if (local.kind !== 'created') throw new Error(`created expected, got ${local.kind}`);
  t.not(local.principalId, gone.principal_id);
  t.equal(
    (await k.app.identity.directory.find(local.principalId))?.displayName,
    LOCAL_PRINCIPAL_NAME,
  );
  t.same(JSON.parse(await fs.readFile(deps.file, 'utf8')), {
    principal_id: local.principalId,
    token: local.token,
  });
  t.equal((await fs.stat(deps.file)).mode & 0o777, 0o600);
});

void t.test('a disabled principal is not replaced behind its owner', async (t) => {
  const { k, deps } = await setup(t);
  const first = await ensureLocalPrincipal(deps);
  if (first.kind !== 'created') throw new Error(`created expected, got ${first.kind}`);
  await k.app.identity.disablePrincipal(first.principalId);
  const local = await ensureLocalPrincipal(deps);
  t.equal(local.kind, 'unusable');
  t.match(local, { reason: /no longer authenticates/ });
  t.same(JSON.parse(await fs.readFile(deps.file, 'utf8')), {
    principal_id: first.principalId,
    token: first.token,
  });
  const banner = await firstRunBanner({
    ...deps,
    appName: 'svc',
    role: 'api',
    address: 'http://127.0.0.1:1',
  });
  t.match(banner, /No quickstart: the token saved in .* no longer authenticates/);
  t.notMatch(banner, /curl/);
});

void t.test('a saved token that is not the saved principal is not trusted', async (t) => {
  const { k, deps } = await setup(t);
  const first = await ensureLocalPrincipal(deps);
  if (first.kind !== 'created') throw new Error(`created expected, got ${first.kind}`);
  // Another principal's working token under the local principal's id.
  await fs.writeFile(
    deps.file,
    JSON.stringify({ principal_id: first.principalId, token: k.alice.token }),
  );
  t.equal((await ensureLocalPrincipal(deps)).kind, 'unusable');
});

void t.test('a malformed token file is reported, not overwritten', async (t) => {
  const { deps } = await setup(t);
  for (const content of ['not json', 'null', '{"principal_id":"x","token":"y"}', '{"token":1}']) {
    await fs.writeFile(deps.file, content);
    const local = await ensureLocalPrincipal(deps);
    t.match(local, { kind: 'unusable', reason: /is not a saved principal/ }, content);
    t.equal(await fs.readFile(deps.file, 'utf8'), content);
  }
});

void t.test('a token file that cannot be read stops with the error', async (t) => {
  const { deps } = await setup(t);
  await fs.mkdir(deps.file);
  await t.rejects(ensureLocalPrincipal(deps), { code: 'EISDIR' });
});

void t.test('the banner names the listener, the principal and prints the sequence', async (t) => {
  const { deps } = await setup(t);
  const banner = {
    ...deps,
    appName: 'svc',
    role: 'all',
    address: 'http://127.0.0.1:4321',
  };
  const first = await firstRunBanner(banner);
  t.match(first, /^\nsvc is up \(role all\) on http:\/\/127\.0\.0\.1:4321\n/);
  t.match(first, `Created the principal "${LOCAL_PRINCIPAL_NAME}"`);
  t.match(first, `Its token is kept in ${deps.file} (mode 0600), never printed.`);
  const saved = JSON.parse(await fs.readFile(deps.file, 'utf8')) as { token: string };
  const reads = `\nTOKEN=$(sed -E 's/.*"token":"([^"]+)".*/\\1/' ${shellWord(deps.file)})\n`;
  t.ok(first.includes(`\nBASE=http://127.0.0.1:4321${reads}`), 'the sequence reads the token file');
  t.notOk(first.includes(saved.token), 'the token itself is not printed');
  const second = await firstRunBanner(banner);
  t.match(second, `Using the principal "${LOCAL_PRINCIPAL_NAME}"`);
  t.ok(second.includes(reads));
  t.notOk(second.includes(saved.token));
  const keysOf = (s: string): string[] =>
    [...s.matchAll(/Idempotency-Key: ([^']+)'/g)].map((m) => m[1] ?? '');
  t.not(keysOf(first)[0], keysOf(second)[0], 'each start prints fresh keys');
});
