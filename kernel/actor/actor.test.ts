import t from 'tap';
import { newId } from '../ids/index.js';
import { anonymous, isPrincipal, principalActor } from './index.js';
import type { Actor } from './index.js';

void t.test('anonymous', (t) => {
  t.strictSame(anonymous, { kind: 'anonymous' });
  t.ok(Object.isFrozen(anonymous), 'shared, so frozen');
  t.notOk(isPrincipal(anonymous));
  t.end();
});

void t.test('principalActor builds a frozen principal without a token', (t) => {
  const principalId = newId();
  const actor = principalActor({ principalId, principalKind: 'user' });
  t.strictSame(actor, { kind: 'principal', principalId, principalKind: 'user' });
  t.notOk('tokenId' in actor, 'absent token is absent, not undefined');
  t.ok(Object.isFrozen(actor));
  t.ok(isPrincipal(actor));
  t.end();
});

void t.test('principalActor keeps the token that authenticated', (t) => {
  const principalId = newId();
  const tokenId = newId();
  const actor = principalActor({ principalId, principalKind: 'service', tokenId });
  t.strictSame(actor, { kind: 'principal', principalId, principalKind: 'service', tokenId });
  t.end();
});

void t.test('principalActor refuses an unknown principal kind', (t) => {
  t.throws(
    () => principalActor({ principalId: newId(), principalKind: 'robot' as 'user' }),
    new TypeError('unknown principal kind "robot"'),
  );
  t.end();
});

void t.test('isPrincipal narrows the type', (t) => {
  const principalId = newId();
  const actors: Actor[] = [anonymous, principalActor({ principalId, principalKind: 'user' })];
  const ids = actors.filter(isPrincipal).map((a) => a.principalId);
  t.same(ids, [principalId]);
  t.end();
});
