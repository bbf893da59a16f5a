/**
 * Range requests (RFC 9110 section 14) on the static files, read by rules
 * of our own: @fastify/send reads `1e3` as 1 and `0x10` as 0, refuses a
 * suffix longer than the file and a Range it cannot parse as 416, where
 * the RFC selects the whole file or lets the server ignore the Range.
 * @fastify/send never sees the Range: it answers 200 with the whole file,
 * and the onSend hook here narrows that answer (docs/DECISIONS.md).
 */
import { createReadStream, ReadStream } from 'node:fs';
import type { RawRequestDefaultExpression } from 'fastify';
import type { FastifyReply, onRequestHookHandler, onSendHookHandler } from 'fastify';

/** One range-spec of a Range header: an int-range or a suffix-range. */
export type RangeSpec =
  { readonly first: number; readonly last?: number } | { readonly suffix: number };

/** A span of bytes, both ends included. */
export interface ByteSpan {
  /** The first byte's offset. */
  readonly start: number;
  /** The last byte's offset. */
  readonly end: number;
}

const SPEC = /^([0-9]*)-([0-9]*)$/;
const OWS = /^[ \t]+|[ \t]+$/g;

/** Compares two runs of digits as the whole numbers they write, exactly. */
function digitsBelow(a: string, b: string): boolean {
  const x = a.replace(/^0+(?=.)/, '');
  const y = b.replace(/^0+(?=.)/, '');
  return x.length !== y.length ? x.length < y.length : x < y;
}

/**
 * Parses a Range value by RFC 9110 sections 14.1 and 14.2: the unit
 * `bytes` (any case), then a list of int-ranges (`first-`, `first-last`)
 * and suffix-ranges (`-length`), digits only, empty list elements allowed
 * (section 5.6.1.2).
 *
 * @param value the Range header's value.
 * @returns the range-specs in the order sent, or undefined when the value
 *   is no bytes range this server reads: another unit, any syntax error
 *   (`1e3`, `0x10`, `+1`, `x`), or an int-range whose last-pos is below its
 *   first-pos (invalid by section 14.1.1). Such a Range is ignored.
 * @example
 * parseRange('bytes=0-1, -5'); // [{ first: 0, last: 1 }, { suffix: 5 }]
 * parseRange('bytes=1e3-2e3'); // undefined
 */
export function parseRange(value: string): readonly RangeSpec[] | undefined {
  const equals = value.indexOf('=');
  if (equals === -1 || value.slice(0, equals).toLowerCase() !== 'bytes') return undefined;
  const specs: RangeSpec[] = [];
  for (const element of value.slice(equals + 1).split(',')) {
    const text = element.replace(OWS, '');
    if (text === '') continue;
    const match = SPEC.exec(text);
    if (match === null) return undefined;
    const [, first = '', last = ''] = match;
    if (first === '') {
      if (last === '') return undefined;
      specs.push({ suffix: Number(last) });
    } else if (last === '') {
      specs.push({ first: Number(first) });
    } else {
      if (digitsBelow(last, first)) return undefined;
      specs.push({ first: Number(first), last: Number(last) });
    }
  }
  return specs.length === 0 ? undefined : specs;
}

/**
 * The satisfiable spans of a range set on a representation of `size`
 * bytes (RFC 9110 section 14.1.1), merged where they overlap or touch. An
 * int-range is satisfiable when it starts within the file (its end is cut
 * to the file's); a suffix-range when its length is above 0 and the file
 * is not empty, and one longer than the file selects all of it (section
 * 14.1.3).
 *
 * @param specs the parsed range set.
 * @param size the representation's length in bytes.
 * @returns the merged spans, in the order of their starts: none means 416.
 */
export function satisfiableSpans(specs: readonly RangeSpec[], size: number): ByteSpan[] {
  const spans: ByteSpan[] = [];
  for (const spec of specs) {
    if ('suffix' in spec) {
      if (spec.suffix > 0 && size > 0) {
        spans.push({ start: Math.max(0, size - spec.suffix), end: size - 1 });
      }
    } else if (spec.first < size) {
      spans.push({ start: spec.first, end: Math.min(spec.last ?? size - 1, size - 1) });
    }
  }
  spans.sort((a, b) => a.start - b.start);
  const merged: ByteSpan[] = [];
  for (const span of spans) {
    const previous = merged.at(-1);
    if (previous !== undefined && span.start <= previous.end + 1) {
      merged[merged.length - 1] = { start: previous.start, end: Math.max(previous.end, span.end) };
    } else {
      merged.push(span);
    }
  }
  return merged;
}

/**
 * Whether an If-Range lets the Range apply (RFC 9110 section 13.1.5): an
 * entity tag by the strong comparison (a weak ETag never matches), a date
 * when it is exactly the Last-Modified value.
 */
function ifRangeHolds(condition: string | string[] | undefined, reply: FastifyReply): boolean {
  if (condition === undefined) return true;
  // Two of them: no single validator to compare, so the whole file.
  if (typeof condition !== 'string') return false;
  const value = condition.trim();
  const etag = reply.getHeader('etag');
  if (value.startsWith('"')) return typeof etag === 'string' && value === etag;
  if (value.startsWith('W/')) return false;
  return value === reply.getHeader('last-modified');
}

const requested = new WeakMap<RawRequestDefaultExpression, readonly RangeSpec[]>();

/**
 * The server's `onRequest` hook: takes the Range of a GET or HEAD away
 * from the request, so @fastify/send answers 200 with the whole file, and
 * keeps it, when it parses, for {@link rangeReplyHook}. A Range that does
 * not parse is ignored (RFC 9110 section 14.2).
 *
 * @param req the request.
 * @param _reply its reply.
 * @param done Fastify's callback.
 */
export const rangeRequestHook: onRequestHookHandler = (req, _reply, done) => {
  const value = req.raw.headers.range;
  if (value !== undefined && (req.method === 'GET' || req.method === 'HEAD')) {
    delete req.raw.headers.range;
    const specs = parseRange(value);
    if (specs !== undefined) requested.set(req.raw, specs);
  }
  done();
};

/**
 * The server's `onSend` hook: a 200 that offers byte ranges (a static
 * file: `Accept-Ranges: bytes`, a Content-Length, no Content-Encoding), to
 * a request whose Range parsed and whose If-Range holds, becomes a 206
 * with the one span the range set selects, or a `416
 * range_not_satisfiable` with `Content-Range: bytes *` and the size when it
 * selects none. Spans that stay apart after merging get the whole file
 * with 200, as @fastify/send did: no multipart answers.
 *
 * @param req the request.
 * @param reply its reply.
 * @param payload the file stream (GET) or an empty stream (HEAD).
 * @param done Fastify's callback.
 */
export const rangeReplyHook: onSendHookHandler = (req, reply, payload, done) => {
  const specs = requested.get(req.raw);
  requested.delete(req.raw);
  const size = Number(reply.getHeader('content-length'));
  if (
    specs === undefined ||
    reply.statusCode !== 200 ||
    reply.getHeader('accept-ranges') !== 'bytes' ||
    reply.hasHeader('content-encoding') ||
    !Number.isSafeInteger(size) ||
    !ifRangeHolds(req.headers['if-range'], reply) ||
    !(payload instanceof ReadStream || req.method === 'HEAD')
  ) {
    done(null, payload);
    return;
  }
  const spans = satisfiableSpans(specs, size);
  const span = spans[0];
  if (spans.length > 1) {
    done(null, payload);
    return;
  }
  if (span === undefined) {
    if (payload instanceof ReadStream) payload.destroy();
    // The file's own headers describe a body this answer does not have.
    for (const name of [
      'content-type',
      'content-length',
      'etag',
      'last-modified',
      'cache-control',
    ]) {
      reply.removeHeader(name);
    }
    // The shape @fastify/send's own 416 had: problems.ts answers it.
    done(
      Object.assign(new Error('range not satisfiable'), {
        statusCode: 416,
        headers: { 'content-range': `bytes */${String(size)}` },
      }),
    );
    return;
  }
  reply.code(206);
  reply.header('content-range', `bytes ${String(span.start)}-${String(span.end)}/${String(size)}`);
  reply.header('content-length', span.end - span.start + 1);
  if (payload instanceof ReadStream) {
    payload.destroy();
    done(null, createReadStream(payload.path, { start: span.start, end: span.end }));
    return;
  }
  done(null, payload);
};
