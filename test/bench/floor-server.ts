/**
 * The benchmark's HTTP floor: a bare Fastify 5 server with nothing of ours,
 * answering the transfer route with a transfer-shaped 201 built from the
 * parsed body, no database. The same load generator drives it as the real
 * server, so its CPU per request (server and load generator) is what any
 * Fastify server pays on this machine before doing anything: the part of
 * an HTTP request the in-process ceiling does not pay. Listens on
 * `HTTP__PORT` (127.0.0.1), answers `/readyz`; stops on SIGTERM or SIGINT.
 */
import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';

interface TransferBody {
  readonly from_account_id: string;
  readonly to_account_id: string;
  readonly amount: number;
}

const port = Number(process.env['HTTP__PORT'] ?? '0');
const app = Fastify();
app.get('/readyz', (_req, reply) => reply.send({ status: 'ready' }));
app.post<{ Body: TransferBody }>('/api/v1/transfers', async (req, reply) => {
  const id = randomUUID();
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
