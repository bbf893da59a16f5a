import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { anonymous, principalActor } from '../actor/index.js';
import { newId } from '../ids/index.js';
import {
  currentContext,
  enterContext,
  newRequestContext,
  requireContext,
  runWithContext,
  setActor,
} from './index.js';
import type { RequestContext } from './index.js';

function ctx(correlationId: string): RequestContext {
  return { correlationId, actor: anonymous, flags: new Set() };
}

void t.test('outside any context', (t) => {
  t.equal(currentContext(), undefined);
  t.throws(
    () => requireContext(),
    new Error('no request context: the call is not inside a request'),
  );
  t.throws(() => {
    setActor(anonymous);
  }, new Error('no request context: the call is not inside a request'));
  t.end();
});

void t.test('runWithContext makes the context current for the call and returns its result', (t) => {
  const c = ctx('c-1');
  const result = runWithContext(c, () => {
    t.equal(currentContext(), c);
    t.equal(requireContext(), c);
    return 42;
  });
  t.equal(result, 42);
  t.equal(currentContext(), undefined, 'gone after the call');
  t.end();
});

void t.test('the context follows awaits, timers and promises', async (t) => {
  const c = ctx('c-async');
  const seen = await runWithContext(c, async () => {
    await sleep(5);
    const fromTimer = await new Promise<RequestContext | undefined>((resolve) => {
      setTimeout(() => {
        resolve(currentContext());
      }, 1);
    });
    return [currentContext(), fromTimer];
  });
  t.equal(seen[0], c);
  t.equal(seen[1], c);
});

void t.test('contexts are isolated across concurrent async chains', async (t) => {
  const chains = Array.from({ length: 20 }, (_, i) => ctx(`chain-${i}`));
  const results = await Promise.all(
    chains.map((c, i) =>
      runWithContext(c, async () => {
        const ids: string[] = [];
        for (let step = 0; step < 5; step += 1) {
          // Uneven delays interleave the chains.
          await sleep(((i * 7 + step * 3) % 5) + 1);
          ids.push(requireContext().correlationId);
        }
        return ids;
      }),
    ),
  );
  results.forEach((ids, i) => {
    t.same(
      ids,
      Array.from({ length: 5 }, () => `chain-${i}`),
      `chain ${i} saw only its own context`,
    );
  });
});

void t.test('nested runWithContext shadows the outer context and restores it', async (t) => {
  const outer = ctx('outer');
  const inner = ctx('inner');
  await runWithContext(outer, async () => {
    t.equal(currentContext(), outer);
    await runWithContext(inner, async () => {
      await sleep(1);
      t.equal(currentContext(), inner);
      setActor(principalActor({ principalId: newId(), principalKind: 'user' }));
    });
    t.equal(currentContext(), outer, 'outer restored');
    t.equal(outer.actor, anonymous, 'setActor inside touched only the inner context');
    t.equal(inner.actor.kind, 'principal');
  });
});

void t.test('setActor replaces the actor, visible to the rest of the request', async (t) => {
  const c = ctx('c-actor');
  const principalId = newId();
  const later = await runWithContext(c, async () => {
    const pending = sleep(5).then(() => requireContext().actor);
    setActor(principalActor({ principalId, principalKind: 'service' }));
    return pending;
  });
  t.same(later, { kind: 'principal', principalId, principalKind: 'service' });
  t.same(c.actor, later, 'the context object itself holds the new actor');
});

void t.test('flags are shared by the whole request', async (t) => {
  const c = ctx('c-flags');
  await runWithContext(c, async () => {
    await sleep(1);
    requireContext().flags.add('one_time_secret');
  });
  t.ok(c.flags.has('one_time_secret'));
});

void t.test('enterContext sets the context for the rest of the current execution', async (t) => {
  const c = ctx('c-enter');
  const seen = await new Promise<(RequestContext | undefined)[]>((resolve) => {
    // A fresh async resource, like a Fastify hook callback, so the store set
    // here does not leak into the test's own chain.
    setImmediate(() => {
      enterContext(c);
      const now = currentContext();
      setTimeout(() => {
        resolve([now, currentContext()]);
      }, 1);
    });
  });
  t.equal(seen[0], c, 'current right away');
  t.equal(seen[1], c, 'carried into callbacks scheduled afterwards');
  t.equal(currentContext(), undefined, 'the caller chain is untouched');
});

void t.test('enterContext inside runWithContext ends with the run', (t) => {
  const outer = ctx('outer');
  const entered = ctx('entered');
  runWithContext(outer, () => {
    enterContext(entered);
    t.equal(currentContext(), entered);
  });
  t.equal(currentContext(), undefined);
  t.end();
});

void t.test('newRequestContext starts anonymous with no flags', (t) => {
  const c = newRequestContext('c-new');
  t.equal(c.correlationId, 'c-new');
  t.equal(c.actor, anonymous);
  t.equal(c.flags.size, 0);
  t.not(newRequestContext('c-new').flags, c.flags, 'each context has its own flags');
  const actor = principalActor({ principalId: newId(), principalKind: 'user' });
  t.equal(newRequestContext('c-actor', actor).actor, actor);
  t.end();
});
