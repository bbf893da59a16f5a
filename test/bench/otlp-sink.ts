/**
 * The benchmark's trace collector: a process of its own that takes the
 * traced server's OTLP/HTTP JSON posts (`POST /v1/traces`), counts the
 * spans in them and answers 200, as a collector on the same machine
 * would, so the server's cost of tracing is measured with a real export
 * and the collector's own CPU is not the server's. `GET /count` answers
 * `{ posts, spans, requestSpans, refused }` (requestSpans: the HTTP server
 * spans, one per request that was sampled and exported; refused: posts
 * that were not JSON, answered 400), which the bench reads to see whether
 * spans were dropped. Listens on `HTTP__PORT`
 * (127.0.0.1), answers `/readyz`; stops on SIGTERM or SIGINT.
 */
import http from 'node:http';

interface OtlpBody {
  readonly resourceSpans?: readonly {
    readonly scopeSpans?: readonly { readonly spans?: readonly { readonly name?: string }[] }[];
  }[];
}

const port = Number(process.env['HTTP__PORT'] ?? '0');
const counts = { posts: 0, spans: 0, requestSpans: 0, refused: 0 };

const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/v1/traces') {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: OtlpBody;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString()) as OtlpBody;
      } catch {
        // Not OTLP JSON (a protobuf export, a stray request): refused, and
        // the collector lives on, so the bench can still read its counts
        // and stop it.
        counts.refused += 1;
        res.writeHead(400, { 'content-type': 'application/json' }).end('{}');
        return;
      }
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
