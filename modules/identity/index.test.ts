import t from 'tap';
import { ManualClock } from '../../kernel/clock/index.js';
import { newId } from '../../kernel/ids/index.js';
import { testDatabase } from '../../test/harness/db.js';
import { testUnitOfWork } from '../../test/harness/uow.js';
import { createIdentityModule, createPrincipalWithToken } from './index.js';

void t.test('the module wires its ports and operator actions to one database', async (t) => {
  const tdb = await testDatabase(t);
  const { db, uow } = testUnitOfWork(t, tdb, { applicationName: 'identity-index-test', max: 2 });
  const clock = new ManualClock('2030-06-01T12:00:00Z');
  const deps = { db, uow, clock };
  const identity = createIdentityModule(deps);
  t.equal(identity.descriptor.name, 'identity');
  t.type(identity.descriptor.routes, 'function');

  // What `principal create --name X --kind service` runs.
  const created = await createPrincipalWithToken(deps, {
    displayName: 'Nightly export',
    kind: 'service',
    tokenName: 'cron',
  });
  t.same(Object.keys(created).sort(), ['principalId', 'token', 'tokenId']);
  const authenticate = (token: string, now: Date) =>
    identity.authenticator.authenticate(token, now);
  const find = (id: typeof created.principalId) => identity.directory.find(id);
  t.same(await authenticate(created.token, clock.now()), {
    kind: 'principal',
    principalId: created.principalId,
    principalKind: 'service',
    tokenId: created.tokenId,
  });
  t.same(await find(created.principalId), {
    id: created.principalId,
    kind: 'service',
    displayName: 'Nightly export',
    createdAt: clock.now(),
    disabledAt: null,
  });
  const [token] = await tdb.owner<{ name: string }[]>`
    select name from api_tokens where id = ${created.tokenId}`;
  t.equal(token?.name, 'cron');

  const user = await identity.createPrincipalWithToken({ displayName: 'Ada' });
  t.equal((await find(user.principalId))?.kind, 'user', 'kind defaults to user');
  await t.rejects(
    identity.createPrincipalWithToken({ displayName: 'X', kind: 'robot' as 'user' }),
    { code: 'validation_failed', detail: 'kind must be "user" or "service".' },
    'a kind from the command line is checked',
  );

  await identity.disablePrincipal(user.principalId);
  t.equal(await authenticate(user.token, clock.now()), null, 'a disabled principal is refused');
  t.ok(await authenticate(created.token, clock.now()), 'others are unaffected');
  await t.rejects(identity.disablePrincipal(newId()), { code: 'not_found' });
});
