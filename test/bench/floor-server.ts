/**
 * The benchmark's HTTP floor: a bare Fastify 5 server with nothing of ours,
 * answering the transfer route with a transfer-shaped 201 built from the
 * parsed body, no database. The same load generator drives it as the real
 * server, so its CPU per request (server and load generator) is what any
 * Fastify server pays on this machine before doing anything: the part of
 * an HTTP request the in-process ceiling does not pay. Listens on
 * `HTTP__PORT` (127.0.0.1), answers `/readyz`; stops on SIGTERM or SIGINT.
 *
 * `PUT /hold/:ms` sets how long each transfer answer is held before it is
 * sent (0 at start, at once): the held floor (`http_floor_held`) waits for
 * the unkeyed baseline's mean latency, since an answer that waits costs the
 * server and the load generator more than one sent at once. A timer is the
 * cheapest wait there is, so the held floor is still a floor.
 */
import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';

interface TransferBody {
  readonly from_account_id: string;
  readonly to_account_id: string;
  readonly amount: number;
}

const port = Number(process.env['HTTP__PORT'] ?? '0');
let holdMs = 0;
const app = Fastify();
app.get('/readyz', (_req, reply) => reply.send({ status: 'ready' }));
app.put<{ Params: { ms: string } }>('/hold/:ms', (req, reply) => {
  const ms = Number(req.params.ms);
  if (!Number.isFinite(ms) || ms < 0 || ms > 60_000) {
    return reply.code(400).send({ error: 'hold must be 0 to 60000 ms' });
  }
  holdMs = ms;
  return reply.code(204).send();
});
app.post<{ Body: TransferBody }>('/api/v1/transfers', async (req, reply) => {
  const id = randomUUID();
  if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs));
  reply.code(201).header('location', `/api/v1/transfers/${id}`);
  return {
    id,
    from_account_id: req.body.from_account_id,
    to_account_id: req.body.to_account_id,
    amount: req.body.amount,
    created_at: new Date().toISOString(),
  };
});
await app.listen({ host: '127.0.0.1', port });
const stop = (): void => {
  void app.close().then(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
