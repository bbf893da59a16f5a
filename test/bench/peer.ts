/**
 * The peer library for the comparison: @node-idempotency/core with its
 * in-memory storage adapter, wired into the same application through Fastify
 * hooks the way the library's own framework adapter (its NestJS interceptor)
 * wires it: look the key up before the handler, replay a stored answer with
 * `idempotent-replayed: true`, store the handler's answer after it. It is not
 * transactional: the key lives in process memory, apart from the effect.
 *
 * The key is taken off the request in `onRequest`, so this project's own
 * idempotency stage sees an unkeyed request and stands aside: the route, its
 * validation, handler and transaction are exactly those of the unkeyed
 * baseline, with the peer in front.
 */
import { Idempotency, IdempotencyError, IdempotencyErrorCodes } from '@node-idempotency/core';
import { MemoryStorageAdapter } from '@node-idempotency/storage-adapter-memory';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ModuleDescriptor } from '../../platform/module/index.js';

/** The routes the peer guards (method and URL). */
export const PEER_ROUTES: ReadonlySet<string> = new Set(['POST /api/v1/transfers']);

const HEADER = 'idempotency-key';

interface PeerState {
  readonly key: string;
  replayed: boolean;
}

const states = new WeakMap<FastifyRequest, PeerState>();

/** The HTTP status of each of the library's errors, as its adapter maps them. */
const STATUS: Record<IdempotencyErrorCodes, number> = {
  [IdempotencyErrorCodes.IDEMPOTENCY_KEY_LEN_EXEEDED]: 400,
  [IdempotencyErrorCodes.IDEMPOTENCY_KEY_MISSING]: 400,
  [IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH]: 422,
  [IdempotencyErrorCodes.REQUEST_IN_PROGRESS]: 409,
};

function params(request: FastifyRequest, key: string) {
  return {
    headers: { [HEADER]: key },
    body: request.body as Record<string, unknown>,
    path: request.url,
    method: request.method,
  };
}

/**
 * A module descriptor that installs the peer library on {@link PEER_ROUTES}.
 *
 * @returns the descriptor to pass through `extraModules`.
 */
export function peerModule(): ModuleDescriptor {
  const peer = new Idempotency(new MemoryStorageAdapter(), { cacheTTLMS: 24 * 3_600_000 });
  return {
    name: 'peer',
    routes: (http) => {
      http.addHook('onRequest', async (request: FastifyRequest) => {
        const key = request.headers[HEADER];
        if (typeof key !== 'string' || !PEER_ROUTES.has(`${request.method} ${request.url}`)) {
          return;
        }
        // Hidden from this project's own stage (which reads the raw header
        // lines), so it stands aside.
        delete request.headers['idempotency-key'];
        const raw = request.raw.rawHeaders;
        for (let i = raw.length - 2; i >= 0; i -= 2) {
          if (raw[i]?.toLowerCase() === HEADER) raw.splice(i, 2);
        }
        states.set(request, { key, replayed: false });
        await Promise.resolve();
      });
      http.addHook('preHandler', async (request: FastifyRequest, reply: FastifyReply) => {
        const state = states.get(request);
        if (state === undefined) return;
        try {
          const stored = await peer.onRequest<string, unknown>(params(request, state.key));
          if (stored === undefined) return;
          state.replayed = true;
          const additional = stored.additional ?? {};
          if (typeof additional['location'] === 'string') {
            void reply.header('location', additional['location']);
          }
          await reply
            .code(typeof additional['statusCode'] === 'number' ? additional['statusCode'] : 200)
            .header('idempotent-replayed', 'true')
            .header('content-type', 'application/json; charset=utf-8')
            .send(stored.body);
        } catch (err) {
          if (!(err instanceof IdempotencyError)) throw err;
          await reply
            .code(STATUS[err.code])
            .header('content-type', 'application/problem+json')
            .send(JSON.stringify({ title: err.message, status: STATUS[err.code] }));
        }
      });
      http.addHook('onSend', async (request: FastifyRequest, reply: FastifyReply, payload) => {
        const state = states.get(request);
        // Every answer is stored, errors included, as the library's adapter does.
        if (state === undefined || state.replayed) return payload;
        const location = reply.getHeader('location');
        await peer.onResponse(params(request, state.key), {
          body: payload,
          additional: {
            statusCode: reply.statusCode,
            ...(typeof location === 'string' ? { location } : {}),
          },
        });
        return payload;
      });
    },
  };
}
