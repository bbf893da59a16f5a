/**
 * The body bytes of a keyed request, as received: the fingerprint's input.
 * Kept by the plugin itself in a `preParsing` hook, whatever body parser the
 * application uses (Fastify's own JSON parser keeps no bytes), so no
 * application has to provide them and none can forget to.
 */
import { Transform, pipeline, type Readable } from 'node:stream';

/** A stream the body parser reads, and the chunks that went through it. */
export interface KeptBytes {
  /** What the parser reads instead of the request. */
  readonly stream: Transform;
  /** The chunks so far; complete once the parser has read the body. */
  readonly chunks: Buffer[];
}

/**
 * Passes the request's payload through unchanged while keeping its chunks.
 * The stream reports `receivedEncodedLength`, which Fastify's body limit and
 * Content-Length checks read; an error or abort of the request reaches the
 * parser through it.
 *
 * @param payload the request's payload stream, as preParsing receives it.
 * @returns the stream to hand Fastify, and the chunks.
 */
export function keepBytes(payload: Readable): KeptBytes {
  const chunks: Buffer[] = [];
  let received = 0;
  const stream: Transform & { receivedEncodedLength?: number } = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      chunks.push(chunk);
      received += chunk.length;
      stream.receivedEncodedLength = received;
      callback(null, chunk);
    },
  });
  pipeline(payload, stream, () => undefined);
  return { stream, chunks };
}
