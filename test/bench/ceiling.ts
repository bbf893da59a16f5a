/**
 * The in-process ceiling of the transfer: the same use case the HTTP route
 * calls (the ledger's service over its PostgreSQL adapters, in the same
 * unit-of-work implementation, pool and database), driven by concurrent
 * callers in the bench's own process, with no HTTP. Each call does what a
 * request's SQL does: the token lookup, then the transfer; keyed, the key
 * is taken, the transfer runs in a savepoint and the answer is stored in
 * the same transaction, the way the idempotency plugin uses its store
 * (platform/http/idempotency/attempt.ts), after the replay cache a fresh
 * key misses. What HTTP adds on top of this is what the web layer costs.
 */
import type { Authenticator } from '../../kernel/actor/index.js';
import type { IdempotencyStore } from '../../kernel/idempotency/index.js';
import { newId, type Id } from '../../kernel/ids/index.js';
import type { UnitOfWork } from '../../kernel/txn/index.js';
import type { LedgerService } from '../../modules/ledger/index.js';
import { fingerprint } from '../../platform/http/idempotency/fingerprint.js';
import type { LoadFigures } from './load.js';
import { processCpuMicros, processWrites, treeCpuMicros } from './proc.js';

/** What the ceiling drives. */
export interface CeilingOptions {
  readonly uow: UnitOfWork;
  readonly authenticator: Authenticator;
  readonly ledger: LedgerService;
  readonly store: IdempotencyStore;
  /** A bearer token of the principal that owns the accounts. */
  readonly token: string;
  /** Builds each call's transfer body (JSON, as the HTTP load sends it). */
  readonly nextBody: () => string;
  /** Concurrent callers. */
  readonly concurrency: number;
  readonly seconds: number;
  /** Take a key per call, as a keyed request does. */
  readonly keyed: boolean;
  /** `sync.idempotency_key_ttl`, in ms. */
  readonly ttlMs: number;
  /** The postmaster, for PostgreSQL's CPU time. */
  readonly postmasterPid: number;
}

/** The stored answer of a transfer, as the route serializes it. */
function answerOf(t: Awaited<ReturnType<LedgerService['transfer']>>): Record<string, unknown> {
  return {
    id: t.id,
    from_account_id: t.fromAccountId,
    to_account_id: t.toAccountId,
    amount: t.amount,
    created_at: t.createdAt.toISOString(),
  };
}

/**
 * One call: authenticate, then transfer (keyed: through the store).
 *
 * @param o the options.
 * @param body the transfer's JSON body.
 */
async function call(o: CeilingOptions, body: string): Promise<void> {
  const actor = await o.authenticator.authenticate(o.token, new Date());
  if (actor?.kind !== 'principal') throw new Error('the ceiling token was refused');
  const principalId: Id = actor.principalId;
  const parsed = JSON.parse(body) as {
    from_account_id: string;
    to_account_id: string;
    amount: number;
  };
  const input = {
    fromAccountId: parsed.from_account_id,
    toAccountId: parsed.to_account_id,
    amount: parsed.amount,
  };
  if (!o.keyed) {
    await o.ledger.transfer(principalId, input);
    return;
  }
  const request = {
    principalId,
    key: newId(),
    action: 'createTransfer',
    sha256: fingerprint({
      method: 'POST',
      rawUrl: '/api/v1/transfers',
      ifMatch: undefined,
      ifNoneMatch: undefined,
      body: Buffer.from(body),
    }),
    now: new Date(),
    ttlMs: o.ttlMs,
  };
  // The replay fast path, from memory, which a fresh key misses.
  if (o.store.recall(principalId, request.key, request.now) !== null) {
    throw new Error('a fresh key was found');
  }
  await o.uow.run(async () => {
    const taking = o.store.take(request);
    const transfer = await o.uow.run(
      async () => {
        if (!(await taking)) throw new Error('a fresh key was not taken');
        return o.ledger.transfer(principalId, input);
      },
      { nested: true },
    );
    await o.store.completeAtCommit(request, {
      status: 201,
      body: answerOf(transfer),
      resourceId: transfer.id,
    });
  });
}

/**
 * Drives concurrent callers of one call for the given time and reports
 * throughput, latency, CPU per call of this process and of PostgreSQL, and
 * writes to PostgreSQL per call (this process's write system calls: it
 * writes nothing else then). Shared by the ceiling and the limit (limit.ts).
 *
 * @param o callers, seconds and the postmaster.
 * @param once one call; it must succeed.
 * @returns the figures, in the shape of an HTTP load's.
 * @throws what a call throws.
 */
export async function driveCalls(
  o: { readonly concurrency: number; readonly seconds: number; readonly postmasterPid: number },
  once: () => Promise<void>,
): Promise<LoadFigures> {
  const self = process.pid;
  const node0 = processCpuMicros(self);
  const pg0 = treeCpuMicros(o.postmasterPid);
  const writes0 = processWrites(self);
  const started = performance.now();
  const end = started + o.seconds * 1000;
  const latencies: number[] = [];
  await Promise.all(
    Array.from({ length: o.concurrency }, async () => {
      while (performance.now() < end) {
        const at = performance.now();
        await once();
        latencies.push(performance.now() - at);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const node1 = processCpuMicros(self);
  const pg1 = treeCpuMicros(o.postmasterPid);
  const writes1 = processWrites(self);
  latencies.sort((a, b) => a - b);
  const n = latencies.length;
  const at = (q: number) => latencies[Math.min(n - 1, Math.floor(q * n))] ?? NaN;
  return {
    requests: n,
    seconds,
    rps: n / seconds,
    p50Ms: at(0.5),
    p99Ms: at(0.99),
    non2xx: 0,
    errors: 0,
    statuses: { '201': n },
    nodeCpuUsPerRequest: n === 0 ? 0 : (node1 - node0) / n,
    pgCpuUsPerRequest: n === 0 ? 0 : (pg1 - pg0) / n,
    pgWritesPerRequest: n === 0 ? 0 : (writes1 - writes0) / n,
    loadCpuUsPerRequest: 0,
  };
}

/**
 * Runs the callers for the given time (see {@link driveCalls}).
 *
 * @param o what to drive and how hard.
 * @returns the figures, in the shape of an HTTP load's.
 * @throws Error when a call fails (every call must succeed).
 */
export function runCeiling(o: CeilingOptions): Promise<LoadFigures> {
  return driveCalls(o, () => call(o, o.nextBody()));
}
