/**
 * Support for test/reliability/bad-input-fuzz.test.ts.
 *
 * - A raw HTTP/1.1 client over `node:net`: it sends exactly the bytes it is
 *   given (header values with control characters or latin1 bytes, repeated
 *   headers, invalid UTF-8 bodies, a Content-Length that lies), which `fetch`
 *   and `node:http` refuse to send, and reads back every answer the server
 *   writes before it closes the connection.
 * - The fast-check generators of bad requests, as plain data.
 * - The oracles: what the design document (01-idempotency.md) and the HTTP
 *   grammar say must happen to each request, derived from those rather than
 *   from the server's code.
 */
import net from 'node:net';
import fc from 'fast-check';

/** One header line: a name and the raw bytes of its value. */
export type RawHeader = readonly [name: string, value: string | Buffer];

/** How the request states its body length. */
export type BodyFraming =
  | { readonly kind: 'exact' }
  | { readonly kind: 'none' }
  | { readonly kind: 'chunked' }
  | { readonly kind: 'declared'; readonly value: string };

/** What to send. */
export interface RawRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: readonly RawHeader[];
  readonly body: Buffer;
  readonly framing: BodyFraming;
}

/** One answer read back. */
export interface RawAnswer {
  readonly status: number;
  /** Header names in lower case; repeated headers keep every value. */
  readonly headers: Readonly<Record<string, readonly string[]>>;
  readonly body: Buffer;
}

/** The outcome of one exchange. */
export type Exchange =
  | { readonly kind: 'answered'; readonly answers: readonly RawAnswer[]; readonly ms: number }
  | {
      readonly kind: 'no_answer';
      /** `timeout`: nothing within the limit; `closed`: the server closed without a word. */
      readonly why: 'timeout' | 'closed' | 'unparseable';
      readonly received: Buffer;
      readonly ms: number;
      readonly error: string | undefined;
    };

/**
 * Serializes a request. `Host` and `Connection: close` come first, then the
 * given headers in order, then the framing header, then the body bytes.
 *
 * @param req the request.
 * @returns the bytes on the wire.
 */
export function encodeRequest(req: RawRequest): Buffer {
  const parts: Buffer[] = [
    Buffer.from(`${req.method} ${req.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n`),
  ];
  for (const [name, value] of req.headers) {
    parts.push(
      Buffer.from(`${name}: `, 'latin1'),
      typeof value === 'string' ? Buffer.from(value, 'latin1') : value,
      Buffer.from('\r\n'),
    );
  }
  let body = req.body;
  switch (req.framing.kind) {
    case 'exact':
      parts.push(Buffer.from(`Content-Length: ${String(body.length)}\r\n`));
      break;
    case 'declared':
      parts.push(Buffer.from(`Content-Length: ${req.framing.value}\r\n`, 'latin1'));
      break;
    case 'chunked': {
      parts.push(Buffer.from('Transfer-Encoding: chunked\r\n'));
      const chunks: Buffer[] = [];
      for (let at = 0; at < body.length; at += 4096) {
        const piece = body.subarray(at, at + 4096);
        chunks.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
      }
      chunks.push(Buffer.from('0\r\n\r\n'));
      body = Buffer.concat(chunks);
      break;
    }
    case 'none':
      break;
  }
  parts.push(Buffer.from('\r\n'), body);
  return Buffer.concat(parts);
}

function indexOfCrlf(buf: Buffer, from: number): number {
  return buf.indexOf('\r\n', from, 'latin1');
}

/**
 * Parses the answers in the bytes a connection delivered, up to its close.
 *
 * @param buf every byte received.
 * @returns the answers, or undefined when the bytes are not a sequence of
 *   complete HTTP/1.1 answers.
 */
export function parseAnswers(buf: Buffer): RawAnswer[] | undefined {
  const answers: RawAnswer[] = [];
  let at = 0;
  while (at < buf.length) {
    const headEnd = buf.indexOf('\r\n\r\n', at, 'latin1');
    if (headEnd < 0) return undefined;
    const lines = buf.subarray(at, headEnd).toString('latin1').split('\r\n');
    const statusLine = /^HTTP\/1\.[01] (\d{3})(?: .*)?$/.exec(lines[0] ?? '');
    if (statusLine?.[1] === undefined) return undefined;
    const headers: Record<string, string[]> = {};
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':');
      if (colon <= 0) return undefined;
      const name = line.slice(0, colon).toLowerCase();
      (headers[name] ??= []).push(line.slice(colon + 1).trim());
    }
    at = headEnd + 4;
    const status = Number(statusLine[1]);
    // An interim answer (100 Continue to `Expect: 100-continue`) has no body
    // and is followed by the final one.
    if (status < 200) continue;
    const length = headers['content-length'];
    const chunked = headers['transfer-encoding']?.some((v) => /chunked/i.test(v)) === true;
    let body: Buffer;
    if (chunked) {
      const pieces: Buffer[] = [];
      for (;;) {
        const sizeEnd = indexOfCrlf(buf, at);
        if (sizeEnd < 0) return undefined;
        const size = Number.parseInt(buf.subarray(at, sizeEnd).toString('latin1'), 16);
        if (!Number.isInteger(size) || size < 0) return undefined;
        at = sizeEnd + 2;
        if (size === 0) {
          const trailerEnd = buf.indexOf('\r\n', at, 'latin1');
          if (trailerEnd < 0) return undefined;
          at = trailerEnd + 2;
          break;
        }
        if (at + size + 2 > buf.length) return undefined;
        pieces.push(buf.subarray(at, at + size));
        at += size + 2;
      }
      body = Buffer.concat(pieces);
    } else if (length !== undefined) {
      const n = Number(length[0]);
      if (length.length !== 1 || !Number.isSafeInteger(n) || at + n > buf.length) return undefined;
      body = buf.subarray(at, at + n);
      at += n;
    } else {
      // Delimited by the close of the connection.
      body = buf.subarray(at);
      at = buf.length;
    }
    answers.push({ status, headers, body });
  }
  return answers.length === 0 ? undefined : answers;
}

/**
 * Sends a request on a fresh connection and reads until the server closes it
 * (the request says `Connection: close`), or until the time limit.
 *
 * @param port the server's port on 127.0.0.1.
 * @param bytes the request bytes.
 * @param options `timeoutMs`: the limit; `halfClose`: end our side after
 *   writing, so a server waiting for body bytes that will never come sees
 *   the end of the stream.
 * @returns the answers, or why there were none.
 */
export function exchange(
  port: number,
  bytes: Buffer,
  options: { readonly timeoutMs: number; readonly halfClose: boolean },
): Promise<Exchange> {
  const started = performance.now();
  return new Promise((resolve) => {
    const received: Buffer[] = [];
    let error: string | undefined;
    let settled = false;
    const socket = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    const finish = (timedOut: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const all = Buffer.concat(received);
      const ms = performance.now() - started;
      const answers = timedOut ? undefined : parseAnswers(all);
      if (answers !== undefined) {
        resolve({ kind: 'answered', answers, ms });
        return;
      }
      let why: 'timeout' | 'closed' | 'unparseable' = 'unparseable';
      if (timedOut) why = 'timeout';
      else if (all.length === 0) why = 'closed';
      resolve({ kind: 'no_answer', why, received: all, ms, error });
    };
    const timer = setTimeout(() => {
      finish(true);
    }, options.timeoutMs);
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.on('end', () => {
      // The server is done writing; our side may still be half open.
      finish(false);
    });
    socket.on('close', () => {
      finish(false);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      // EPIPE or ECONNRESET while we still write (a 413 answered early):
      // what was read before it still counts.
      error = err.code ?? err.message;
    });
    socket.on('connect', () => {
      socket.write(bytes);
      if (options.halfClose) socket.end();
    });
  });
}

// ---------------------------------------------------------------------------
// What a fuzz case is: plain data, so fast-check prints a readable
// counterexample and shrinks it. Values that exist only at run time (tokens,
// account ids, keys stored earlier) are named, not embedded.
// ---------------------------------------------------------------------------

/** The routes under test. */
export type RouteName =
  'transfers' | 'accounts' | 'effects' | 'rename' | 'plain' | 'readAccount' | 'unknown';

interface RouteSpec {
  readonly method: string;
  /** Declares `idempotent: true`. */
  readonly keyed: boolean;
  /** Carries a body (POST or PATCH). */
  readonly hasBody: boolean;
  /** The path, given the id segment for the account routes. */
  readonly path: (id: string) => string;
}

/** Every route of the fuzz and how it is reached. */
export const ROUTES: Readonly<Record<RouteName, RouteSpec>> = {
  transfers: { method: 'POST', keyed: true, hasBody: true, path: () => '/api/v1/transfers' },
  accounts: { method: 'POST', keyed: true, hasBody: true, path: () => '/api/v1/accounts' },
  effects: { method: 'POST', keyed: true, hasBody: true, path: () => '/api/v1/effects' },
  rename: { method: 'PATCH', keyed: true, hasBody: true, path: (id) => `/api/v1/accounts/${id}` },
  plain: { method: 'POST', keyed: false, hasBody: true, path: () => '/api/v1/plain-effects' },
  readAccount: {
    method: 'GET',
    keyed: false,
    hasBody: false,
    path: (id) => `/api/v1/accounts/${id}`,
  },
  unknown: { method: 'POST', keyed: false, hasBody: true, path: () => '/api/v1/nowhere' },
};

/** How the path is spelled. */
export type PathCase =
  | 'canonical'
  | 'percentEncoded'
  | 'fragment'
  | 'trailingSlash'
  | 'upperCase'
  | 'badEscape'
  | 'rawSpace'
  | 'rawNul'
  | 'rawLatin1';

/** The account id in the path of `rename` and `readAccount`. */
export type IdCase = 'aliceA' | 'aliceAUpper' | 'bob' | 'v4' | 'otherV7' | 'garbage' | 'long';

/** How a header value is written around a uuid. */
export type UuidForm = 'bare' | 'upper' | 'quoted' | 'quotedUpper' | 'padded' | 'tabbed';

/** One `Idempotency-Key` value. */
export type KeyValue =
  | { readonly kind: 'uuid'; readonly uuid: string; readonly form: UuidForm }
  | { readonly kind: 'reuse'; readonly pick: number; readonly form: UuidForm }
  | { readonly kind: 'text'; readonly text: string };

/** One header line of a fuzzed header: its name as spelled and its value. */
export interface Line<V> {
  readonly name: string;
  readonly value: V;
}

/** One `Authorization` value. */
export type AuthValue =
  | {
      readonly kind: 'token';
      readonly who: 'alice' | 'bob';
      readonly form:
        | 'Bearer'
        | 'lowerScheme'
        | 'upperSchemeTwoSpaces'
        | 'padded'
        | 'noScheme'
        | 'appended'
        | 'truncated'
        | 'quoted'
        | 'twoTokens'
        | 'basic'
        | 'commaList';
    }
  | { readonly kind: 'text'; readonly text: string };

/** How the body length is stated. */
export type FramingCase =
  | { readonly kind: 'exact' }
  | { readonly kind: 'chunked' }
  /** Content-Length names fewer bytes than follow (the rest is a garbage second request). */
  | { readonly kind: 'shorter'; readonly cut: number }
  /** Content-Length names more bytes than follow; the client then ends its side. */
  | { readonly kind: 'longer'; readonly extra: number }
  | { readonly kind: 'badLength'; readonly value: string }
  | { readonly kind: 'lengthAndChunked' }
  | { readonly kind: 'badChunk' }
  /**
   * `Transfer-Encoding: gzip`: the parser dispatches the head, then would
   * refuse the body; the server refuses the head first (400, pointer
   * `#header/Transfer-Encoding`).
   */
  | { readonly kind: 'otherEncoding' };

/** Framings the HTTP parser refuses only once it reads the body. */
const isLateFault = (f: FramingCase): boolean =>
  f.kind === 'longer' || f.kind === 'badChunk' || f.kind === 'otherEncoding';

/** A body, described. */
export type BodyCase =
  | { readonly kind: 'none' }
  | { readonly kind: 'valid'; readonly variant: number }
  | { readonly kind: 'member'; readonly member: number; readonly literal: string }
  | { readonly kind: 'extra'; readonly name: string; readonly literal: string }
  | {
      readonly kind: 'duplicate';
      readonly member: number;
      readonly escaped: boolean;
      readonly literal: string;
    }
  | {
      readonly kind: 'deep';
      readonly depth: number;
      readonly open: 'array' | 'object';
      readonly inMember: boolean;
      readonly balanced: boolean;
    }
  | { readonly kind: 'literal'; readonly text: string }
  | { readonly kind: 'bytes'; readonly hex: string }
  | { readonly kind: 'splice'; readonly hex: string }
  | { readonly kind: 'truncate'; readonly at: number }
  | { readonly kind: 'json'; readonly value: unknown }
  | { readonly kind: 'padded'; readonly before: string; readonly after: string }
  /** Another body after a UTF-8 byte order mark (EF BB BF). */
  | { readonly kind: 'bom'; readonly inner: BodyCase };

/** Harmless header lines (`j0: 1`, ...) sent before the key. */
export interface JunkLines {
  readonly lines: number;
  /** Bytes of each value: wide lines take the head over the 16 KiB limit. */
  readonly width: number;
}

/** One fuzz case: one request. */
export interface FuzzCase {
  readonly route: RouteName;
  readonly path: PathCase;
  readonly id: IdCase;
  readonly query: string;
  readonly auth: readonly Line<AuthValue>[];
  readonly key: readonly Line<KeyValue>[];
  readonly contentType: readonly Line<string>[];
  readonly correlation: readonly Line<string>[];
  readonly ifMatch: readonly Line<string>[];
  readonly body: BodyCase;
  readonly framing: FramingCase;
  /**
   * Harmless header lines before the key: up to 1500 short ones (Node.js
   * used to drop every line after about the first thousand, key included),
   * or wide ones that take the head over the 16 KiB limit.
   */
  readonly junk: JunkLines;
  /** An `Expect` header: none, `100-continue`, or an expectation no server meets. */
  readonly expect: '' | '100-continue' | 'teapot';
}

// ---------------------------------------------------------------------------
// Generators.
// ---------------------------------------------------------------------------

/** Control characters a header value may not hold (everything below 0x20 but HTAB, and DEL). */
const CONTROL_CHARACTERS = [
  '\x00',
  '\x01',
  '\x08',
  '\x0b',
  '\x0c',
  '\x0d',
  '\x0a',
  '\x1b',
  '\x1f',
  '\x7f',
];

/** A printable ASCII string, or one with latin1 or control characters in it. */
const oddText = (maxLength: number): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 4, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength }) },
    {
      weight: 2,
      arbitrary: fc.string({
        unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c)),
        maxLength,
      }),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.string({ unit: 'grapheme-ascii', maxLength }),
          fc.constantFrom(...CONTROL_CHARACTERS),
          fc.nat(),
        )
        .map(([s, c, at]) => s.slice(0, at % (s.length + 1)) + c + s.slice(at % (s.length + 1))),
    },
  );

const headerName = (canonical: string, wrong: readonly string[]): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 12, arbitrary: fc.constant(canonical) },
    { weight: 2, arbitrary: fc.constantFrom(canonical.toLowerCase(), canonical.toUpperCase()) },
    { weight: 1, arbitrary: fc.constantFrom(...wrong) },
  );

const uuidForm: fc.Arbitrary<UuidForm> = fc.oneof(
  { weight: 6, arbitrary: fc.constant<UuidForm>('bare') },
  {
    weight: 1,
    arbitrary: fc.constantFrom<UuidForm>('upper', 'quoted', 'quotedUpper', 'padded', 'tabbed'),
  },
);

const keyText: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '',
    '   ',
    '""',
    '"',
    'null',
    '00000000-0000-0000-0000-000000000000',
    'ffffffff-ffff-ffff-ffff-ffffffffffff',
    '0190f2a4-1b2c-7d3e-8f40-123456789abc0',
    '0190f2a41b2c7d3e8f40123456789abc',
    '{0190f2a4-1b2c-7d3e-8f40-123456789abc}',
    'urn:uuid:0190f2a4-1b2c-7d3e-8f40-123456789abc',
    "'0190f2a4-1b2c-7d3e-8f40-123456789abc'",
    '"0190f2a4-1b2c-7d3e-8f40-123456789abc',
    '" 0190f2a4-1b2c-7d3e-8f40-123456789abc"',
    '0190f2a4-1b2c-7d3e-8f40-123456789abc, 0190f2a4-1b2c-7d3e-8f40-123456789abd',
    '0190f2a4-1b2c-7d3e-8f40-123456789abc;0190f2a4-1b2c-7d3e-8f40-123456789abd',
    '0190f2a4-1b2c-7d3e-cf40-123456789abc',
    '0190f2a4-1b2c-7d3e-8f40-123456789abg',
    '0190f2a4\t1b2c-7d3e-8f40-123456789abc',
    '0190f2a4-1b2c-7d3e-8f40-123456789ab\xe9',
    '\xe9\xe8\xff',
    'x'.repeat(3000),
    '0190f2a4-1b2c-7d3e-8f40-123456789abc'.repeat(80),
  ),
  oddText(60),
);

const keyValue: fc.Arbitrary<KeyValue> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('uuid' as const),
      uuid: fc.oneof(
        { weight: 8, arbitrary: fc.uuid({ version: 7 }) },
        { weight: 2, arbitrary: fc.uuid({ version: [1, 4, 6, 8] }) },
      ),
      form: uuidForm,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('reuse' as const), pick: fc.nat(), form: uuidForm }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('text' as const), text: keyText }) },
);

const keyLines: fc.Arbitrary<readonly Line<KeyValue>[]> = fc.oneof(
  { weight: 2, arbitrary: fc.constant([]) },
  {
    weight: 14,
    arbitrary: fc
      .record({
        name: headerName('Idempotency-Key', [
          'Idempotency_Key',
          'IdempotencyKey',
          'X-Idempotency-Key',
          'Idempotency-Key ',
          'Idempotency Key',
        ]),
        value: keyValue,
      })
      .map((line) => [line]),
  },
  {
    weight: 1,
    arbitrary: fc.array(fc.record({ name: fc.constant('Idempotency-Key'), value: keyValue }), {
      minLength: 2,
      maxLength: 3,
    }),
  },
);

const authValue: fc.Arbitrary<AuthValue> = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.record({
      kind: fc.constant('token' as const),
      who: fc.constantFrom<'alice' | 'bob'>('alice', 'alice', 'alice', 'bob'),
      form: fc.oneof(
        { weight: 12, arbitrary: fc.constant('Bearer' as const) },
        {
          weight: 1,
          arbitrary: fc.constantFrom(
            'lowerScheme' as const,
            'upperSchemeTwoSpaces' as const,
            'padded' as const,
          ),
        },
        {
          weight: 2,
          arbitrary: fc.constantFrom(
            'noScheme' as const,
            'appended' as const,
            'truncated' as const,
            'quoted' as const,
            'twoTokens' as const,
            'basic' as const,
            'commaList' as const,
          ),
        },
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('text' as const),
      text: fc.oneof(
        fc.constantFrom(
          '',
          'Bearer',
          'Bearer ',
          'Bearer =',
          'Basic dXNlcjpwYXNz',
          'Bearer tok_aaaaaaaa.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
          `Bearer ${'a'.repeat(3000)}`,
          `Bearer ${'a'.repeat(20000)}`,
          'Bearer \xe9\xe8',
        ),
        oddText(80).map((s) => `Bearer ${s}`),
        oddText(40),
      ),
    }),
  },
);

const authLines: fc.Arbitrary<readonly Line<AuthValue>[]> = fc.oneof(
  { weight: 1, arbitrary: fc.constant([]) },
  {
    weight: 12,
    arbitrary: fc
      .record({
        name: headerName('Authorization', ['Authorisation', 'X-Authorization']),
        value: authValue,
      })
      .map((line) => [line]),
  },
  {
    weight: 1,
    arbitrary: fc.array(fc.record({ name: fc.constant('Authorization'), value: authValue }), {
      minLength: 2,
      maxLength: 2,
    }),
  },
);

const contentTypeValue: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 14,
    arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8'),
  },
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      'APPLICATION/JSON',
      'Application/Json; Charset=UTF-8',
      'application/json;charset=utf-8',
      'application/json; charset=utf-16',
      'application/json; charset=latin1',
      'application/json; charset="utf-8"',
      'application/json;;;',
      'application/json; foo=bar; foo=baz',
      'application/json ; charset=utf-8',
      'application/json; charset=\xe9',
      'text/plain',
      'text/plain; charset=utf-8',
      'text/json',
      'multipart/form-data; boundary=x',
      'application/x-www-form-urlencoded',
      'application/merge-patch+json',
      'application/problem+json',
      'application/jsonx',
      'application/json/',
      'application/json, text/plain',
      'application/',
      'application/octet-stream',
      '*/*',
      'json',
      '',
    ),
  },
  { weight: 1, arbitrary: oddText(40) },
);

const contentTypeLines: fc.Arbitrary<readonly Line<string>[]> = fc.oneof(
  { weight: 2, arbitrary: fc.constant([]) },
  {
    weight: 16,
    arbitrary: fc
      .record({
        name: headerName('Content-Type', ['Content_Type', 'ContentType']),
        value: contentTypeValue,
      })
      .map((line) => [line]),
  },
  {
    weight: 1,
    arbitrary: fc.array(fc.record({ name: fc.constant('Content-Type'), value: contentTypeValue }), {
      minLength: 2,
      maxLength: 2,
    }),
  },
);

const correlationLines: fc.Arbitrary<readonly Line<string>[]> = fc.oneof(
  { weight: 6, arbitrary: fc.constant([]) },
  {
    weight: 1,
    arbitrary: fc
      .record({
        name: fc.constant('Correlation-Id'),
        value: fc.oneof(
          fc.uuid({ version: [4, 7] }),
          fc.uuid({ version: 7 }).map((u) => u.toUpperCase()),
          oddText(40),
        ),
      })
      .map((line) => [line]),
  },
  {
    weight: 1,
    arbitrary: fc.array(
      fc.record({ name: fc.constant('Correlation-Id'), value: fc.uuid({ version: 7 }) }),
      { minLength: 2, maxLength: 2 },
    ),
  },
);

const ifMatchLines: fc.Arbitrary<readonly Line<string>[]> = fc.oneof(
  { weight: 1, arbitrary: fc.constant([]) },
  {
    weight: 3,
    arbitrary: fc
      .record({
        name: fc.constant('If-Match'),
        value: fc.oneof(
          fc.constantFrom(
            '"1"',
            '"2"',
            '*',
            'W/"1"',
            '"1", "2"',
            ', "1"',
            '"99999999999999999999"',
            '"9007199254740991"',
            '"abc"',
            '1',
            '""',
            '"\xe9"',
          ),
          oddText(30),
        ),
      })
      .map((line) => [line]),
  },
);

/** Raw JSON literals that are the wrong type or an odd number for a member. */
const LITERALS = [
  '"10"',
  'true',
  'false',
  'null',
  '[]',
  '{}',
  '1.5',
  '-1',
  '0',
  '-0',
  '1',
  '1.0',
  '1E2',
  '10.0e0',
  '1e400',
  '-1e400',
  '1e-400',
  '0.99999999999999999',
  '1.0000000000000001',
  '99.999999999999999999',
  '123456789012345678901234567890',
  '9007199254740991',
  '9007199254740992',
  '9007199254740993',
  '""',
  '" "',
  '"\\u0000"',
  '"a\\u0000b"',
  '"\\ud800"',
  '"\\udfff"',
  '"x\\ud800y"',
  '"\\ud83d\\ude00"',
  '"\\u0061"',
  '"a\\tb"',
  '"\\u0085"',
  `"${'x'.repeat(101)}"`,
  `"${'\\ud83d\\ude00'.repeat(60)}"`,
  '"0190f2a4-1b2c-7d3e-8f40-123456789abc"',
  '"0190F2A4-1B2C-7D3E-8F40-123456789ABC"',
  '"6ba7b810-9dad-41d1-80b4-00c04fd430c8"',
  '[1]',
  '[["x"]]',
  '{"a":1}',
  '{"__proto__":{"x":1}}',
];

const literal: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...LITERALS) },
  { weight: 1, arbitrary: fc.string({ maxLength: 20 }).map((s) => JSON.stringify(s)) },
  { weight: 1, arbitrary: fc.double().map((d) => (Number.isFinite(d) ? String(d) : '0')) },
);

const memberName: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    'currency',
    '__proto__',
    'constructor',
    'prototype',
    '',
    'a/b~c',
    '\\u0000',
    '\\ud800',
    '\\u005f_proto__',
    'Label',
    'amount ',
    'x'.repeat(3000),
  ),
  fc.string({ unit: 'grapheme-ascii', maxLength: 12 }).map((s) => JSON.stringify(s).slice(1, -1)),
);

const HEX_SEQUENCES = [
  'ff',
  'fe ff',
  'c0 80',
  'c1 bf',
  'ed a0 80',
  'ed bf bf',
  'ed a0 80 ed b0 80',
  'f4 90 80 80',
  'f5 80 80 80',
  'e2 82',
  'f0 9f 98',
  '80',
  '00',
  '0a',
  '09',
  'c3 a9',
  'f0 9f 98 80',
  'e2 80 a8',
  'ef bb bf',
];

const hexBytes: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...HEX_SEQUENCES) },
  {
    weight: 1,
    arbitrary: fc
      .uint8Array({ minLength: 1, maxLength: 12 })
      .map((a) => [...a].map((b) => b.toString(16).padStart(2, '0')).join(' ')),
  },
);

const LITERAL_BODIES = [
  'hello',
  'label=x',
  '<label>x</label>',
  '{}',
  '[]',
  'null',
  'true',
  '0',
  '"x"',
  '{"label":"x",}',
  "{'label':'x'}",
  '{"label":"x"} x',
  '{"label":"x"}{"label":"y"}',
  '{"label":"x"} // c',
  '/* c */ {"label":"x"}',
  'NaN',
  'Infinity',
  '{"label":NaN}',
  '0x10',
  '01',
  '+1',
  '.5',
  '1.',
  '-',
  '{"label":"x"',
  '{',
  '[',
  ']',
  '}',
  '"',
  '\\',
  '{"label":"\\x"}',
  '{"label":"\\u12"}',
  '{"label":"\\ud800\\u0041"}',
  '{"__proto__":{"label":"x"}}',
  '{"constructor":{"prototype":{"label":"x"}}}',
  '[{"__proto__":1}]',
  '{"a":{"a":{"a":1,"a":2}}}',
];

const plainBodyCase: fc.Arbitrary<BodyCase> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({ kind: 'none' as const }) },
  {
    weight: 10,
    arbitrary: fc.record({ kind: fc.constant('valid' as const), variant: fc.nat(9) }),
  },
  {
    weight: 6,
    arbitrary: fc.record({ kind: fc.constant('member' as const), member: fc.nat(2), literal }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('extra' as const), name: memberName, literal }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('duplicate' as const),
      member: fc.nat(2),
      escaped: fc.boolean(),
      literal,
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('deep' as const),
      depth: fc.oneof(
        fc.constantFrom(2, 62, 63, 64, 65, 66, 100, 1000, 5000, 50_000),
        fc.integer({ min: 1, max: 3000 }),
      ),
      open: fc.constantFrom<'array' | 'object'>('array', 'object'),
      inMember: fc.boolean(),
      balanced: fc.oneof(
        { weight: 4, arbitrary: fc.constant(true) },
        { weight: 1, arbitrary: fc.constant(false) },
      ),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('literal' as const),
      text: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom(...LITERAL_BODIES) },
        { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
      ),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('bytes' as const), hex: hexBytes }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('splice' as const), hex: hexBytes }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('json' as const),
      value: fc.jsonValue({ maxDepth: 3 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('padded' as const),
      before: fc.constantFrom('', ' ', '\r\n\t ', '\ufeff', '\u00a0', 'x'),
      after: fc.constantFrom('', ' ', '\r\n\t ', '\u00a0', 'x', '\u0000'),
    }),
  },
);

/** A body, or (now and then) the same body after a byte order mark. */
const bodyCase: fc.Arbitrary<BodyCase> = fc.oneof(
  { weight: 14, arbitrary: plainBodyCase },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('bom' as const),
      inner: fc.oneof(
        {
          weight: 3,
          arbitrary: fc.record({ kind: fc.constant('valid' as const), variant: fc.nat(9) }),
        },
        { weight: 1, arbitrary: plainBodyCase },
      ),
    }),
  },
);

const framingCase: fc.Arbitrary<FramingCase> = fc.oneof(
  { weight: 40, arbitrary: fc.constant({ kind: 'exact' as const }) },
  { weight: 4, arbitrary: fc.constant({ kind: 'chunked' as const }) },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('shorter' as const), cut: fc.nat() }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('longer' as const),
      extra: fc.integer({ min: 1, max: 100_000 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('badLength' as const),
      value: fc.constantFrom(
        'abc',
        '-1',
        '1.5',
        '0x10',
        '1e3',
        '5 5',
        '+5',
        '99999999999999999999',
        '',
        '\xe9',
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      { kind: 'lengthAndChunked' as const },
      { kind: 'badChunk' as const },
      { kind: 'otherEncoding' as const },
    ),
  },
);

const pathCase: fc.Arbitrary<PathCase> = fc.oneof(
  { weight: 30, arbitrary: fc.constant<PathCase>('canonical') },
  {
    weight: 3,
    arbitrary: fc.constantFrom<PathCase>(
      'percentEncoded',
      'fragment',
      'trailingSlash',
      'upperCase',
      'badEscape',
      'rawSpace',
      'rawNul',
      'rawLatin1',
    ),
  },
);

const idCase: fc.Arbitrary<IdCase> = fc.oneof(
  { weight: 6, arbitrary: fc.constant<IdCase>('aliceA') },
  {
    weight: 3,
    arbitrary: fc.constantFrom<IdCase>('aliceAUpper', 'bob', 'v4', 'otherV7', 'garbage', 'long'),
  },
);

const routeName: fc.Arbitrary<RouteName> = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.constantFrom<RouteName>('transfers', 'accounts', 'effects', 'rename'),
  },
  { weight: 3, arbitrary: fc.constantFrom<RouteName>('plain', 'readAccount', 'unknown') },
);

/** Every part of a request drawn at random, independently. */
const randomCase: fc.Arbitrary<FuzzCase> = fc.record({
  route: routeName,
  path: pathCase,
  id: idCase,
  query: fc.oneof(
    { weight: 20, arbitrary: fc.constant('') },
    {
      weight: 1,
      arbitrary: fc.constantFrom('?', '?a=1', '?a=%zz', '?a=1&a=2', `?x=${'y'.repeat(200)}`),
    },
  ),
  auth: authLines,
  key: keyLines,
  contentType: contentTypeLines,
  correlation: correlationLines,
  ifMatch: ifMatchLines,
  body: bodyCase,
  framing: framingCase,
  junk: fc.oneof(
    { weight: 24, arbitrary: fc.constant({ lines: 0, width: 1 }) },
    {
      weight: 4,
      arbitrary: fc.record({
        lines: fc.oneof(
          fc.constantFrom(1, 50, 500, 1000, 1015, 1055, 1100, 1500),
          fc.integer({ min: 1, max: 1500 }),
        ),
        width: fc.constant(1),
      }),
    },
    {
      // 1500 lines of 8 bytes count about 17000 bytes: around the limit.
      weight: 2,
      arbitrary: fc.record({
        lines: fc.integer({ min: 900, max: 1500 }),
        width: fc.constantFrom(8, 12, 16),
      }),
    },
  ),
  expect: fc.oneof(
    { weight: 30, arbitrary: fc.constant('' as const) },
    { weight: 1, arbitrary: fc.constantFrom('100-continue' as const, 'teapot' as const) },
  ),
});

/** A well-formed keyed request of alice: the baseline one or two faults are put into. */
const wellFormedCase: fc.Arbitrary<FuzzCase> = fc.record({
  route: routeName,
  path: fc.constant<PathCase>('canonical'),
  id: fc.constant<IdCase>('aliceA'),
  query: fc.constant(''),
  auth: fc.constant([
    { name: 'Authorization', value: { kind: 'token', who: 'alice', form: 'Bearer' } } as const,
  ]),
  key: fc
    .uuid({ version: 7 })
    .map((uuid) => [
      { name: 'Idempotency-Key', value: { kind: 'uuid', uuid, form: 'bare' } } as const,
    ]),
  contentType: fc.constant([{ name: 'Content-Type', value: 'application/json' }]),
  correlation: fc.constant([]),
  ifMatch: fc.constant([{ name: 'If-Match', value: '"1"' }]),
  body: fc.record({ kind: fc.constant('valid' as const), variant: fc.nat(9) }),
  framing: fc.constant({ kind: 'exact' as const }),
  junk: fc.constant({ lines: 0, width: 1 }),
  expect: fc.constant('' as const),
});

const PARTS = [
  'path',
  'id',
  'query',
  'auth',
  'key',
  'contentType',
  'correlation',
  'ifMatch',
  'body',
  'framing',
  'junk',
  'expect',
] as const satisfies readonly (keyof FuzzCase)[];

/**
 * A random request to one of the routes: either every part random, or (more
 * often, so the later stages of a request are reached too) a well-formed
 * request with one to three parts replaced by random ones.
 */
export const fuzzCase: fc.Arbitrary<FuzzCase> = fc.oneof(
  { weight: 1, arbitrary: randomCase },
  {
    weight: 2,
    arbitrary: fc
      .tuple(wellFormedCase, randomCase, fc.subarray([...PARTS], { minLength: 1, maxLength: 3 }))
      .map(([base, random, parts]) => {
        const c: Record<string, unknown> = { ...base };
        for (const part of parts) c[part] = random[part];
        return c as unknown as FuzzCase;
      }),
  },
);

// ---------------------------------------------------------------------------
// From a case to bytes, and what the contract says about them. The oracles
// below are written from the design document and the HTTP grammar, not from
// the server's code.
// ---------------------------------------------------------------------------

/** A principal of the fuzz. */
export type Who = 'alice' | 'bob';

/** What exists at run time: tokens, accounts, keys stored so far. */
export interface FuzzContext {
  readonly tokens: Readonly<Record<Who, string>>;
  readonly aliceA: string;
  readonly aliceB: string;
  readonly bobAccount: string;
  /** Keys whose answer was stored, by principal: what a "reuse" key picks from. */
  readonly stored: Readonly<Record<Who, readonly string[]>>;
}

/** What parsing a body must give, by the design document's rules. */
export type BodyVerdict =
  | { readonly kind: 'empty' }
  | { readonly kind: 'too_large' }
  /** Refused at parse time with one of these codes (pointer `#body`), never stored. */
  | { readonly kind: 'refused'; readonly codes: readonly string[] }
  | { readonly kind: 'json' };

/** What the `Idempotency-Key` lines amount to. */
export type KeyVerdict =
  | { readonly kind: 'absent' }
  | { readonly kind: 'invalid' }
  | { readonly kind: 'valid'; readonly key: string };

/** Who the request authenticates as. */
export type AuthVerdict = Who | 'anonymous' | 'refused';

/** How the content type must be treated. */
export type ContentTypeVerdict = 'json' | 'either' | 'not_json' | 'absent';

/** What the contract says about one request. */
export interface Expectation {
  /**
   * Who answers first. `transport`: the HTTP parser refuses the head, the
   * application never sees it (one of {@link Expectation.head});
   * `expectation`: the head is well formed but its `Expect` cannot be met
   * (417, before any route); `router`: the router refuses the path (400,
   * pointer `#path`); `transportLate`: the parser refuses the body when it
   * gets there, the application may have answered a refusal it decides from
   * the head before that; `app`: the application answers.
   */
  readonly layer: 'transport' | 'expectation' | 'router' | 'transportLate' | 'app';
  readonly why: readonly string[];
  /**
   * For `transport`: what the parser may answer. A malformed head (`malformed`:
   * 400 pointer `#`) and a head over the limit (`too_large`: 431) are both
   * possible when the head is both: the parser reports the fault it meets
   * first, which depends on where the bytes split into reads.
   */
  readonly head: readonly HeadFault[];
  /** Header lines before the key ({@link FuzzCase.junk}). */
  readonly junkLines: number;
  /** The body sent starts with a UTF-8 byte order mark. */
  readonly bom: boolean;
  /**
   * The body never fully arrives (a Content-Length longer than the bytes, a
   * broken chunk): the HTTP parser refuses it when it gets there, after any
   * early answer of the router or the application.
   */
  readonly lateBodyFault: boolean;
  readonly route: RouteName;
  readonly routeMatched: boolean;
  readonly auth: AuthVerdict;
  readonly contentType: ContentTypeVerdict;
  readonly body: BodyVerdict;
  readonly key: KeyVerdict;
  readonly query: boolean;
  /** The correlation id the answer must echo, when the request gave a usable one. */
  readonly correlation: string | undefined;
}

/** Why the HTTP parser refuses a head. */
export type HeadFault = 'malformed' | 'too_large';

/** A case turned into bytes, with what must happen. */
export interface Materialized {
  readonly request: Buffer;
  readonly halfClose: boolean;
  readonly expect: Expectation;
  /**
   * For a Content-Length shorter than the body: the same request with the
   * body the server saw (the prefix), sent again with the same key once the
   * first exchange is over, so the test knows the key's final state.
   */
  readonly settle: { readonly request: Buffer; readonly expect: Expectation } | undefined;
}

/** The largest body the server accepts (`http.body_limit` default). */
export const BODY_LIMIT = 1_048_576;
/** The deepest nesting the design allows. */
export const MAX_DEPTH = 64;
/**
 * Node.js's default limit on the request head (`--max-http-header-size`):
 * 431 once {@link headCount} reaches it.
 */
export const HEAD_LIMIT = 16_384;

/**
 * The reason an expectation gives when the router refuses the path: the
 * judge then takes the path's refusal as an answer from the head alone.
 */
export const ROUTER_REFUSES = 'the router refuses the path';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
const ANY_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
const TOKEN_CHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** RFC 6750 section 2.1: `Bearer` (any case), one or more spaces, a b64token. */
const BEARER = /^bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;
const FIXED_V4 = '6ba7b810-9dad-41d1-80b4-00c04fd430c8';
const OTHER_V7 = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** Effect outcomes that would crash on purpose or wait for 30 s or forever. */
const UNSAFE_EFFECT = /crash|sleep/;

const trimOws = (s: string): string => s.replace(/^[ \t]+|[ \t]+$/g, '');

/** Whether a header value holds a byte the HTTP grammar forbids there (CTL but HTAB). */
function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const code = s.charCodeAt(i);
    if ((code < 0x20 && code !== 0x09) || code === 0x7f) return true;
  }
  return false;
}

/** Whether a request target holds a byte it may not (CTL, space, or anything past ASCII). */
function hasRawByte(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const code = s.charCodeAt(i);
    if (code <= 0x20 || code >= 0x7f) return true;
  }
  return false;
}

function uuidIn(form: UuidForm, uuid: string): string {
  switch (form) {
    case 'bare':
      return uuid;
    case 'upper':
      return uuid.toUpperCase();
    case 'quoted':
      return `"${uuid}"`;
    case 'quotedUpper':
      return `"${uuid.toUpperCase()}"`;
    case 'padded':
      return `  ${uuid} `;
    case 'tabbed':
      return `\t${uuid}\t`;
  }
}

function authText(value: AuthValue, ctx: FuzzContext): string {
  if (value.kind === 'text') return value.text;
  const tok = ctx.tokens[value.who];
  switch (value.form) {
    case 'Bearer':
      return `Bearer ${tok}`;
    case 'lowerScheme':
      return `bearer ${tok}`;
    case 'upperSchemeTwoSpaces':
      return `BEARER  ${tok}`;
    case 'padded':
      return ` Bearer ${tok} \t`;
    case 'noScheme':
      return tok;
    case 'appended':
      return `Bearer ${tok}x`;
    case 'truncated':
      return `Bearer ${tok.slice(0, -1)}`;
    case 'quoted':
      return `Bearer "${tok}"`;
    case 'twoTokens':
      return `Bearer ${tok} ${tok}`;
    case 'basic':
      return `Basic ${Buffer.from(`user:${tok}`).toString('base64')}`;
    case 'commaList':
      return `Bearer ${tok}, Bearer ${tok}`;
  }
}

/**
 * Who a request authenticates as: two or more `Authorization` headers are
 * refused (a proxy may read another one than Node.js, which keeps the
 * first); a present header must be a bearer token of a principal, anything
 * else is refused (never anonymous).
 */
function authVerdict(values: readonly string[], ctx: FuzzContext): AuthVerdict {
  const first = values[0];
  if (first === undefined) return 'anonymous';
  if (values.length > 1) return 'refused';
  const token = BEARER.exec(trimOws(first))?.[1];
  if (token === ctx.tokens.alice) return 'alice';
  if (token === ctx.tokens.bob) return 'bob';
  return 'refused';
}

/** The design's key format: one header, a UUIDv7 bare or in double quotes, either case. */
function keyVerdict(values: readonly string[]): KeyVerdict {
  if (values.length === 0) return { kind: 'absent' };
  if (values.length > 1) return { kind: 'invalid' };
  const value = trimOws(values[0] ?? '');
  const bare =
    value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;
  return V7.test(bare) ? { kind: 'valid', key: bare.toLowerCase() } : { kind: 'invalid' };
}

/** JSON content types: `application/json`, bare or with charset utf-8; odd parameters may go either way. */
function contentTypeVerdict(values: readonly string[]): ContentTypeVerdict {
  const first = values[0];
  if (first === undefined) return 'absent';
  const v = trimOws(first).toLowerCase();
  if (
    [
      'application/json',
      'application/json; charset=utf-8',
      'application/json;charset=utf-8',
    ].includes(v)
  )
    return 'json';
  if (/^application\/json(?:[ ;]|$)/.test(v)) return 'either';
  return 'not_json';
}

function correlationVerdict(values: readonly string[]): string | undefined {
  if (values.length !== 1) return undefined;
  const v = trimOws(values[0] ?? '');
  return ANY_UUID.test(v) ? v.toLowerCase() : undefined;
}

/** The nesting depth of a parsed JSON value, walked without recursion. */
function depthOf(value: unknown): number {
  let deepest = 0;
  const pending: [unknown, number][] = [[value, 0]];
  while (pending.length > 0) {
    const [v, d] = pending.pop() ?? [null, 0];
    if (typeof v !== 'object' || v === null) continue;
    deepest = Math.max(deepest, d + 1);
    for (const item of Object.values(v)) pending.push([item, d + 1]);
  }
  return deepest;
}

/** Bracket depth of a text that is not valid JSON (strings skipped), for the too_deep code. */
function bracketDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '[' || c === '{') deepest = Math.max(deepest, ++depth);
    else if (c === ']' || c === '}') depth--;
  }
  return deepest;
}

/** What is wrong with the strings and member names of a parsed value, by the design's rules. */
function badStrings(value: unknown): string[] {
  const codes = new Set<string>();
  const check = (s: string) => {
    if (s.includes('\u0000')) codes.add('nul_character');
    if (LONE_SURROGATE.test(s)) codes.add('lone_surrogate');
  };
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const v = pending.pop();
    if (typeof v === 'string') check(v);
    else if (typeof v === 'object' && v !== null) {
      for (const [name, item] of Object.entries(v as Record<string, unknown>)) {
        check(name);
        if (name === '__proto__') codes.add('prototype_poisoning');
        if (
          name === 'constructor' &&
          typeof item === 'object' &&
          item !== null &&
          Object.hasOwn(item, 'prototype')
        )
          codes.add('prototype_poisoning');
        pending.push(item);
      }
    }
  }
  return [...codes];
}

/**
 * What the body parser must do with these bytes: the design refuses invalid
 * UTF-8, invalid JSON, nesting deeper than 64, prototype poisoning, a member
 * named twice in one object (I-JSON), a number a double reads as a whole
 * number other than the one written, U+0000 and lone surrogates (400, never
 * stored) and bodies over the limit (413).
 * A leading byte order mark makes valid UTF-8 `invalid_json`, whatever
 * follows (docs/api/README.md; RFC 8259 section 8.1 lets a parser refuse it).
 */
export function bodyVerdict(bytes: Buffer): BodyVerdict {
  if (bytes.length === 0) return { kind: 'empty' };
  if (bytes.length > BODY_LIMIT) return { kind: 'too_large' };
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return { kind: 'refused', codes: ['invalid_utf8'] };
  }
  if (text.startsWith('\ufeff')) return { kind: 'refused', codes: ['invalid_json'] };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return {
      kind: 'refused',
      codes: bracketDepth(text) > MAX_DEPTH ? ['invalid_json', 'too_deep'] : ['invalid_json'],
    };
  }
  const codes = badStrings(value);
  if (depthOf(value) > MAX_DEPTH) codes.push('too_deep');
  else if (namesAMemberTwice(text)) codes.push('duplicate_member');
  if (holdsARoundedWholeNumber(text)) codes.push('inexact_number');
  return codes.length > 0 ? { kind: 'refused', codes } : { kind: 'json' };
}

/**
 * Whether an object in a valid JSON text names a member twice, names
 * compared after unescaping: the oracle's own scan, independent of the
 * server's parser. The text must be valid JSON nested at most
 * {@link MAX_DEPTH} deep (the scan recurses).
 */
function namesAMemberTwice(text: string): boolean {
  let i = 0;
  let found = false;
  const skipSpace = () => {
    while (i < text.length && ' \t\n\r'.includes(text.charAt(i))) i++;
  };
  const string = (): string => {
    const start = i++;
    while (text.charAt(i) !== '"') i += text.charAt(i) === '\\' ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i)) as string;
  };
  const value = (): void => {
    skipSpace();
    const c = text.charAt(i);
    if (c === '{' || c === '[') {
      i++;
      const names = new Set<string>();
      skipSpace();
      if (text.charAt(i) === (c === '{' ? '}' : ']')) {
        i++;
        return;
      }
      for (;;) {
        if (c === '{') {
          skipSpace();
          const name = string();
          if (names.has(name)) found = true;
          names.add(name);
          skipSpace();
          i++; // the colon
        }
        value();
        skipSpace();
        if (text.charAt(i++) !== ',') return;
      }
    }
    if (c === '"') {
      string();
      return;
    }
    while (i < text.length && !',]} \t\n\r'.includes(text.charAt(i))) i++;
  };
  value();
  return found;
}

/**
 * Whether a valid JSON text holds a number whose double is a whole number
 * other than the number written (`0.99999999999999999`, `1e-400`,
 * `9007199254740993`): the oracle's own check, by exact rational
 * comparison of the text with the double, independent of the server's.
 * Strings are skipped; exponents stay within what a double can write, so
 * the powers of ten stay small.
 */
function holdsARoundedWholeNumber(text: string): boolean {
  const outsideStrings = text.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  for (const [token] of outsideStrings.matchAll(/-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g)) {
    const read = Number(token);
    if (!Number.isInteger(read)) continue;
    const [mantissa = '', exponent = '0'] = token.replace('-', '').toLowerCase().split('e');
    const [whole = '', fraction = ''] = mantissa.split('.');
    // written = numerator * 10^power, compared with the double exactly.
    const numerator = BigInt(whole + fraction);
    const power = BigInt(exponent) - BigInt(fraction.length);
    const target = BigInt(Math.abs(read));
    const equal =
      power >= 0n ? numerator * 10n ** power === target : numerator === target * 10n ** -power;
    if (!equal) return true;
  }
  return false;
}

/** The members of a route's valid body, as name and raw JSON text, for a variant. */
function template(route: RouteName, variant: number, ctx: FuzzContext): [string, string][] {
  const q = (s: string) => JSON.stringify(s);
  switch (route) {
    case 'transfers': {
      const pairs: [string, string, string][] = [
        [ctx.aliceA, ctx.aliceB, '1'],
        [ctx.aliceB, ctx.aliceA, '1'],
        [ctx.aliceA, ctx.bobAccount, '1'],
        [ctx.aliceA, ctx.aliceA, '1'],
        [ctx.aliceA, ctx.aliceB, '9007199254740991'],
        [OTHER_V7, ctx.aliceB, '1'],
        [ctx.aliceA.toUpperCase(), ctx.aliceB, '2'],
      ];
      const [from, to, amount] = pairs[variant % pairs.length] ?? pairs[0]!;
      return [
        ['from_account_id', q(from)],
        ['to_account_id', q(to)],
        ['amount', amount],
      ];
    }
    case 'accounts': {
      const variants: [string, string][] = [
        ['fuzz', '100'],
        ['\ud83d\ude00'.repeat(100), '0'],
        ['max', '9007199254740991'],
        ['a\u0007b', '1'],
        ['   ', '1'],
        ['x'.repeat(101), '1'],
      ];
      const [name, opening] = variants[variant % variants.length] ?? variants[0]!;
      return [
        ['name', q(name)],
        ['opening_balance', opening],
      ];
    }
    case 'rename': {
      const names = ['renamed', 'x'.repeat(100), 'bell\u0007', ''];
      return [['name', q(names[variant % names.length] ?? 'renamed')]];
    }
    case 'effects':
    case 'plain':
    case 'unknown': {
      const outcomes = [
        undefined,
        'ok',
        'not_found',
        'conflict',
        'step_up',
        'precondition',
        'secret',
        'throttled',
      ];
      const outcome = outcomes[variant % outcomes.length];
      return [
        ['label', q('fuzz')],
        ...(outcome === undefined ? [] : [['outcome', q(outcome)] as [string, string]]),
      ];
    }
    case 'readAccount':
      return [];
  }
}

/** The UTF-8 byte order mark. */
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

const objectText = (members: readonly (readonly [string, string])[]): string =>
  `{${members.map(([name, value]) => `"${name}":${value}`).join(',')}}`;

const fromHex = (hex: string): Buffer => Buffer.from(hex.replace(/\s+/g, ''), 'hex');

function deepText(depth: number, open: 'array' | 'object', balanced: boolean): string {
  if (open === 'array') return '['.repeat(depth) + (balanced ? ']'.repeat(depth) : '');
  return '{"a":'.repeat(depth) + '1' + (balanced ? '}'.repeat(depth) : '');
}

/** The body bytes of a case. */
function bodyBytes(c: FuzzCase, ctx: FuzzContext): Buffer {
  const members = template(c.route, 0, ctx);
  const plain = objectText(members);
  const b = c.body;
  switch (b.kind) {
    case 'none':
      return Buffer.alloc(0);
    case 'valid':
      return Buffer.from(objectText(template(c.route, b.variant, ctx)));
    case 'member': {
      if (members.length === 0) return Buffer.from(b.literal);
      const at = b.member % members.length;
      return Buffer.from(objectText(members.map(([n, v], i) => [n, i === at ? b.literal : v])));
    }
    case 'extra':
      return Buffer.from(objectText([...members, [b.name, b.literal]]));
    case 'duplicate': {
      const [name] = members[b.member % Math.max(1, members.length)] ?? ['label'];
      const spelled = b.escaped
        ? `\\u${name.charCodeAt(0).toString(16).padStart(4, '0')}${name.slice(1)}`
        : name;
      return Buffer.from(objectText([...members, [spelled, b.literal]]));
    }
    case 'deep': {
      const nest = deepText(b.depth, b.open, b.balanced);
      return Buffer.from(b.inMember ? objectText([...members, ['nest', nest]]) : nest);
    }
    case 'literal':
      return Buffer.from(b.text);
    case 'bytes':
      return fromHex(b.hex);
    case 'splice': {
      const marker = '\u0001';
      const first = members.findIndex(([, v]) => v.startsWith('"'));
      const text =
        first < 0
          ? `{"x":"a${marker}b"}`
          : objectText(members.map(([n, v], i) => [n, i === first ? `"a${marker}b"` : v]));
      const [before = '', after = ''] = text.split(marker);
      return Buffer.concat([Buffer.from(before), fromHex(b.hex), Buffer.from(after)]);
    }
    case 'truncate':
      return Buffer.from(plain.slice(0, b.at % Math.max(1, plain.length)));
    case 'json':
      return Buffer.from(JSON.stringify(b.value));
    case 'padded':
      return Buffer.from(b.before + plain + b.after);
    case 'bom':
      return Buffer.concat([BOM, bodyBytes({ ...c, body: b.inner }, ctx)]);
  }
}

/**
 * Effect bodies must not ask the test module's handlers to crash on purpose
 * (`outcome: "crash"` is a 500 by design), to sleep, or to wait on a gate.
 * Such a body (a random one, or one coerced by the effect routes' default
 * validator) is replaced by the plain valid body. A byte order mark is looked
 * past and kept: a server that wrongly accepted it must not then crash on
 * purpose, which would hide the real fault.
 */
function safeForEffects(route: RouteName, bytes: Buffer, ctx: FuzzContext): Buffer {
  if (route !== 'effects' && route !== 'plain') return bytes;
  const bom = bytes.subarray(0, 3).equals(BOM);
  let value: unknown;
  try {
    value = JSON.parse((bom ? bytes.subarray(3) : bytes).toString('utf8'));
  } catch {
    return bytes;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return bytes;
  const o = value as Record<string, unknown>;
  if (Object.hasOwn(o, 'gate') || UNSAFE_EFFECT.test(JSON.stringify(o['outcome'] ?? null))) {
    const plain = Buffer.from(objectText(template(route, 0, ctx)));
    return bom ? Buffer.concat([BOM, plain]) : plain;
  }
  return bytes;
}

function idText(id: IdCase, ctx: FuzzContext): string {
  switch (id) {
    case 'aliceA':
      return ctx.aliceA;
    case 'aliceAUpper':
      return ctx.aliceA.toUpperCase();
    case 'bob':
      return ctx.bobAccount;
    case 'v4':
      return FIXED_V4;
    case 'otherV7':
      return OTHER_V7;
    case 'garbage':
      return 'not-an-id';
    case 'long':
      return 'a'.repeat(150);
  }
}

function pathText(c: FuzzCase, ctx: FuzzContext): string {
  const base = ROUTES[c.route].path(idText(c.id, ctx));
  switch (c.path) {
    case 'canonical':
      return base + c.query;
    case 'percentEncoded':
      return `/api/v1/%${base.charCodeAt(8).toString(16)}${base.slice(9)}${c.query}`;
    case 'fragment':
      return `${base}${c.query}#frag`;
    case 'trailingSlash':
      return `${base}/${c.query}`;
    case 'upperCase':
      return base.replace('/api/', '/API/') + c.query;
    case 'badEscape':
      return `${base}%zz${c.query}`;
    case 'rawSpace':
      return base.replace('/v1/', '/v1 /') + c.query;
    case 'rawNul':
      return base.replace('/v1/', '/v1\x00/') + c.query;
    case 'rawLatin1':
      return base.replace('/v1/', '/v1\xe9/') + c.query;
  }
}

const named = <V>(lines: readonly Line<V>[], name: string): V[] =>
  lines.filter((l) => l.name.toLowerCase() === name).map((l) => l.value);

/**
 * What Node.js's HTTP parser counts against {@link HEAD_LIMIT}: the request
 * target, and each header line's name and value (the value without its
 * leading white space; trailing white space counts), but not the method, the
 * version, the separators or the line ends. Measured on Node.js 20: a head
 * that counts 16383 is read, one that counts 16384 is refused with 431 (the
 * test `the 16 KiB head limit` pins it). For a malformed head this is an
 * upper bound of what the parser counted before it stopped.
 *
 * @param bytes the request as sent.
 * @returns the count.
 */
export function headCount(bytes: Buffer): number {
  let end = bytes.indexOf('\r\n\r\n', 0, 'latin1');
  if (end < 0) end = bytes.length;
  const [requestLine = '', ...lines] = bytes.subarray(0, end).toString('latin1').split('\r\n');
  let n = requestLine.slice(requestLine.indexOf(' ') + 1, requestLine.lastIndexOf(' ')).length;
  for (const line of lines) {
    const colon = line.indexOf(':');
    n += colon < 0 ? line.length : colon + line.slice(colon + 1).replace(/^[ \t]+/, '').length;
  }
  return n;
}

/**
 * Turns a case into the bytes to send and what the contract says must
 * happen to them.
 *
 * @param c the case.
 * @param ctx tokens, accounts and the keys stored so far.
 * @returns the request, the expectation, and the settling repeat if any.
 */
export function materialize(c: FuzzCase, ctx: FuzzContext): Materialized {
  const spec = ROUTES[c.route];
  const authValues = named(c.auth, 'authorization').map((v) => authText(v, ctx));
  const auth = authVerdict(authValues, ctx);
  const reuseFrom: Who = auth === 'bob' ? 'bob' : 'alice';
  const keyText = (v: KeyValue): string => {
    if (v.kind === 'text') return v.text;
    if (v.kind === 'uuid') return uuidIn(v.form, v.uuid);
    const pool = ctx.stored[reuseFrom];
    const picked = pool[v.pick % Math.max(1, pool.length)];
    return uuidIn(v.form, picked ?? OTHER_V7);
  };
  const junkValue = '1'.repeat(c.junk.width);
  const headers: [string, string][] = [
    ...c.auth.map((l): [string, string] => [l.name, authText(l.value, ctx)]),
    ...c.contentType.map((l): [string, string] => [l.name, l.value]),
    ...Array.from({ length: c.junk.lines }, (_, i): [string, string] => [
      `j${i.toString(36)}`,
      junkValue,
    ]),
    ...c.key.map((l): [string, string] => [l.name, keyText(l.value)]),
    ...(c.expect === '' ? [] : [['Expect', c.expect] as [string, string]]),
    ...c.correlation.map((l): [string, string] => [l.name, l.value]),
    ...(c.route === 'rename' ? c.ifMatch.map((l): [string, string] => [l.name, l.value]) : []),
  ];
  const path = pathText(c, ctx);
  const body = spec.hasBody ? safeForEffects(c.route, bodyBytes(c, ctx), ctx) : Buffer.alloc(0);
  const keyValues = headers
    .filter(([n]) => n.toLowerCase() === 'idempotency-key')
    .map(([, v]) => v);
  const key = keyVerdict(keyValues);
  const contentType = contentTypeVerdict(
    headers.filter(([n]) => n.toLowerCase() === 'content-type').map(([, v]) => v),
  );
  const query = path.includes('?');

  // What makes the head malformed, whatever the framing.
  const malformed: string[] = [];
  for (const [n, v] of headers) {
    if (!TOKEN_CHARS.test(n)) malformed.push(`header name ${JSON.stringify(n)} is not a token`);
    if (hasControl(v)) malformed.push(`header ${n} holds a control character`);
  }
  if (hasRawByte(path)) malformed.push('the path holds a raw byte it may not');
  // The router reads the path before any route: a bad percent escape, or
  // an account id over 100 characters where a route has that parameter
  // (not under /API/, which matches no route at all).
  // A fragment (#) in the target is refused with the framing, before any
  // route, with the router's answer (#path).
  const routerRefuses =
    c.path === 'fragment' ||
    (path.split('?')[0] ?? '').includes('%zz') ||
    (c.id === 'long' &&
      (c.route === 'rename' || c.route === 'readAccount') &&
      c.path !== 'upperCase');

  /** Who answers first, judged on the bytes as sent. */
  const layerOf = (
    request: Buffer,
    f: FramingCase,
  ): Pick<Expectation, 'layer' | 'why' | 'head'> => {
    const why = [...malformed];
    if (f.kind === 'badLength' || f.kind === 'lengthAndChunked') why.push(`framing ${f.kind}`);
    const head: HeadFault[] = why.length > 0 ? ['malformed'] : [];
    const counted = headCount(request);
    if (counted >= HEAD_LIMIT) {
      head.push('too_large');
      why.push(`the head counts ${String(counted)} bytes, the limit is ${String(HEAD_LIMIT)}`);
    }
    if (head.length > 0) return { layer: 'transport', why, head };
    if (c.expect === 'teapot')
      return { layer: 'expectation', why: ['an expectation the server cannot meet'], head };
    if (routerRefuses && isLateFault(f)) {
      // A fragment is refused by the first hooks, which may run after the
      // parser has met the body's fault: either answer may come first.
      if (c.path === 'fragment')
        return { layer: 'transportLate', why: [`framing ${f.kind}`, ROUTER_REFUSES], head };
      // The answer to a path the router cannot read checks the framing
      // first (platform/http/server.ts, frameworkErrors): a transfer
      // coding besides chunked is refused before the path.
      if (f.kind === 'otherEncoding')
        return { layer: 'transportLate', why: [`framing ${f.kind}`], head };
    }
    if (routerRefuses) return { layer: 'router', why: [ROUTER_REFUSES], head };
    if (isLateFault(f)) return { layer: 'transportLate', why: [`framing ${f.kind}`], head };
    return { layer: 'app', why, head };
  };

  let framing: FramingCase = c.framing;
  // A GET's body is not read by its handler, so only head-level framing faults apply.
  if (!spec.hasBody && (isLateFault(framing) || framing.kind === 'shorter'))
    framing = { kind: 'exact' };
  const routeMatched = ['canonical', 'percentEncoded'].includes(c.path) && c.route !== 'unknown';
  const principalKeyed = (auth === 'alice' || auth === 'bob') && spec.keyed && routeMatched;
  const encode = (bytes: Buffer, f: BodyFraming, extra: readonly RawHeader[] = []) =>
    encodeRequest({
      method: spec.method,
      path,
      headers: [...headers, ...extra],
      body: bytes,
      framing: f,
    });
  const base = (f: FramingCase, parsed: Buffer) => ({
    lateBodyFault: isLateFault(f),
    route: c.route,
    routeMatched,
    auth,
    contentType,
    key,
    query,
    correlation: correlationVerdict(
      headers.filter(([n]) => n.toLowerCase() === 'correlation-id').map(([, v]) => v),
    ),
    junkLines: c.junk.lines,
    body: bodyVerdict(parsed),
    bom: parsed.subarray(0, 3).equals(BOM),
  });

  // A shorter Content-Length is only sent where a repeat with the same key
  // can settle what the server did with it (see Materialized.settle).
  if (framing.kind === 'shorter') {
    const fresh = key.kind === 'valid' && !ctx.stored[reuseFrom].includes(key.key);
    const cut = framing.cut % Math.max(1, body.length);
    const request = encode(body, { kind: 'declared', value: String(cut) });
    const judged = layerOf(request, framing);
    if (
      judged.layer === 'app' &&
      principalKeyed &&
      fresh &&
      !query &&
      contentType === 'json' &&
      body.length > 0
    ) {
      const prefix = body.subarray(0, cut);
      const expect: Expectation = { ...base(framing, prefix), ...judged };
      return {
        request,
        halfClose: false,
        expect,
        settle: { request: encode(prefix, { kind: 'exact' }), expect },
      };
    }
    framing = { kind: 'exact' };
  }
  let wire: BodyFraming;
  let halfClose = false;
  let sent = body;
  let parsed = body;
  const extra: RawHeader[] = [];
  switch (framing.kind) {
    case 'exact':
      wire = spec.hasBody && c.body.kind !== 'none' ? { kind: 'exact' } : { kind: 'none' };
      break;
    case 'chunked':
      wire = { kind: 'chunked' };
      break;
    case 'longer':
      wire = { kind: 'declared', value: String(body.length + framing.extra) };
      halfClose = true;
      break;
    case 'badLength':
      wire = { kind: 'declared', value: framing.value };
      break;
    case 'lengthAndChunked':
      wire = { kind: 'declared', value: String(body.length) };
      extra.push(['Transfer-Encoding', 'chunked']);
      break;
    case 'badChunk':
      wire = { kind: 'none' };
      extra.push(['Transfer-Encoding', 'chunked']);
      sent = Buffer.concat([Buffer.from('zz\r\n'), body, Buffer.from('\r\n0\r\n\r\n')]);
      parsed = Buffer.alloc(0);
      break;
    case 'otherEncoding':
      wire = { kind: 'none' };
      extra.push(['Transfer-Encoding', 'gzip']);
      break;
  }
  const request = encode(sent, wire, extra);
  return {
    request,
    halfClose,
    expect: { ...base(framing, parsed), ...layerOf(request, framing) },
    settle: undefined,
  };
}
