/**
 * The benchmark's trace collector: a process of its own that takes the
 * traced server's OTLP/HTTP JSON posts (`POST /v1/traces`), counts the
 * spans in them and answers 200, as a collector on the same machine
 * would, so the server's cost of tracing is measured with a real export
 * and the collector's own CPU is not the server's. `GET /count` answers
 * `{ posts, spans, requestSpans }` (requestSpans: the HTTP server spans,
 * one per request that was sampled and exported), which the bench reads
 * to see whether spans were dropped. Listens on `HTTP__PORT`
 * (127.0.0.1), answers `/readyz`; stops on SIGTERM or SIGINT.
 */
import http from 'node:http';

interface OtlpBody {
  readonly resourceSpans?: readonly {
    readonly scopeSpans?: readonly { readonly spans?: readonly { readonly name?: string }[] }[];
  }[];
}

const port = Number(process.env['HTTP__PORT'] ?? '0');
const counts = { posts: 0, spans: 0, requestSpans: 0 };

const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/v1/traces') {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as OtlpBody;
      counts.posts += 1;
      for (const rs of body.resourceSpans ?? []) {
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            counts.spans += 1;
            if (s.name === 'request') counts.requestSpans += 1;
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
    return;
  }
  req.resume();
  if (req.method === 'GET' && req.url === '/readyz') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ready"}');
    return;
  }
  if (req.method === 'GET' && req.url === '/count') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(counts));
    return;
  }
  res.writeHead(404).end();
});
server.listen(port, '127.0.0.1');
const stop = (): void => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
