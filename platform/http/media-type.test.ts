/**
 * The Content-Type of a JSON body: a charset other than UTF-8, or a
 * parameter list this server cannot read, is refused as 415 before the body
 * is parsed; other parameters are ignored. Through the real server
 * (createHttpServer) and inject.
 */
import t, { type Test } from 'tap';
import { contentTypeRefusal } from './media-type.js';
import { testServerOptions } from '../../test/harness/http-server.js';
import { createHttpServer, type HttpServer } from './server.js';

async function server(t: Test): Promise<{ app: HttpServer; runs: { n: number } }> {
  const app = await createHttpServer(testServerOptions());
  const runs = { n: 0 };
  app.post('/api/v1/echo', { config: { auth: 'none', idempotent: false } }, (req) => {
    runs.n++;
    return Promise.resolve({ got: req.body });
  });
  await app.ready();
  t.teardown(() => app.close());
  return { app, runs };
}

function post(app: HttpServer, contentType: string, payload: string | Buffer = '{"a":1}') {
  return app.inject({
    method: 'POST',
    url: '/api/v1/echo',
    headers: { 'content-type': contentType },
    payload,
  });
}

void t.test('a charset other than UTF-8 is 415 naming the Content-Type header', async (t) => {
  const { app, runs } = await server(t);
  for (const contentType of [
    'application/json; charset=utf-16',
    'application/json; charset="UTF-16LE"',
    'application/json;charset=iso-8859-1',
    'application/json; charset=utf8',
    'application/json; charset=utf-8; charset=utf-16',
    'application/json; CHARSET=us-ascii',
  ]) {
    const res = await post(app, contentType);
    t.equal(res.statusCode, 415, contentType);
    t.match(
      res.json(),
      {
        code: 'unsupported_media_type',
        errors: [{ pointer: '#header/Content-Type', code: 'unsupported_charset' }],
      },
      contentType,
    );
  }
  t.equal(runs.n, 0, 'the handler never ran');
});

void t.test('a parameter list the grammar does not read is 415, not skipped', async (t) => {
  const { app, runs } = await server(t);
  for (const contentType of [
    'application/json; charset="utf-8',
    'application/json; charset=',
    'application/json; charset',
    'application/json; charset=utf-8 utf-16',
    'application/json; =utf-8',
    'application/json; a="b"c',
  ]) {
    const res = await post(app, contentType);
    t.equal(res.statusCode, 415, contentType);
    t.match(
      res.json(),
      {
        code: 'unsupported_media_type',
        errors: [{ pointer: '#header/Content-Type', code: 'invalid_parameters' }],
      },
      contentType,
    );
  }
  t.equal(runs.n, 0, 'the handler never ran');
});

void t.test('UTF-8 in any spelling, and other parameters, are accepted', async (t) => {
  const { app, runs } = await server(t);
  const accepted = [
    'application/json',
    'application/json; charset=utf-8',
    'application/json;charset=UTF-8',
    'application/json; charset="UTF-8"',
    'application/json; charset="utf\\-8"',
    'application/json;\tcharset=Utf-8;',
    'application/json; charset=utf-8 ; profile="urn:x;charset=utf-16"',
    'application/json; version=2',
    'application/json;;',
  ];
  for (const contentType of accepted) {
    const res = await post(app, contentType);
    t.equal(res.statusCode, 200, contentType);
    t.same(res.json(), { got: { a: 1 } }, contentType);
  }
  t.equal(runs.n, accepted.length);
});

void t.test('contentTypeRefusal reads the parameters after the media type', (t) => {
  t.equal(contentTypeRefusal('application/json'), undefined);
  t.equal(contentTypeRefusal('application/json ; charset=utf-8'), undefined);
  t.equal(contentTypeRefusal('application/json; charset=utf-8 '), undefined, 'trailing space');
  t.equal(contentTypeRefusal('application/json; charset=utf-16')?.status, 415);
  t.equal(contentTypeRefusal('application/json; charset="a\\"b"')?.status, 415);
  t.end();
});
