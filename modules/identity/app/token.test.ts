import { createHash } from 'node:crypto';
import t from 'tap';
import { generateToken, parseToken, TOKEN_PATTERN_DESCRIPTION } from './token.js';

void t.test('a generated token has a public prefix and a 256-bit secret', (t) => {
  const issued = generateToken();
  t.match(issued.token, /^tok_[a-z2-7]{8}\.[A-Za-z0-9_-]{43}$/);
  t.equal(issued.prefix, issued.token.slice(0, 12), 'the prefix is the part before the dot');
  const secret = issued.token.slice(13);
  t.equal(Buffer.from(secret, 'base64url').length, 32, '32 random bytes');
  t.same(
    issued.sha256,
    createHash('sha256').update(issued.token, 'utf8').digest(),
    'the hash covers the whole token',
  );
  t.type(TOKEN_PATTERN_DESCRIPTION, 'string');
  t.end();
});

void t.test('generated tokens do not repeat, prefixes nor secrets', (t) => {
  const tokens = Array.from({ length: 2000 }, () => generateToken());
  t.equal(new Set(tokens.map((x) => x.token.slice(13))).size, tokens.length, 'secrets distinct');
  // 40 random bits: a repeat among 2000 has odds of about 2e-6.
  t.equal(new Set(tokens.map((x) => x.prefix)).size, tokens.length, 'prefixes distinct');
  const alphabet = new Set(tokens.flatMap((x) => x.prefix.slice(4).split('')));
  t.ok(alphabet.size > 28, 'the prefix draws on the whole base32 alphabet');
  t.end();
});

void t.test('parseToken reads back what generateToken made', (t) => {
  const issued = generateToken();
  const parsed = parseToken(issued.token);
  t.same(parsed, { prefix: issued.prefix, sha256: issued.sha256 });
  t.end();
});

void t.test('parseToken refuses anything malformed with null', (t) => {
  const good = generateToken().token;
  const [prefix = '', secret = ''] = good.split('.');
  const lastIndex = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'.indexOf(
    secret.at(-1) ?? '',
  );
  // Same bytes, but a last character whose two spare bits are set.
  const nonCanonical = `${prefix}.${secret.slice(0, -1)}${
    'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'[lastIndex | 1] ?? ''
  }`;
  const cases: Record<string, unknown> = {
    empty: '',
    'prefix only': prefix,
    'secret only': secret,
    'no dot': `${prefix}${secret}`,
    'two dots': `${prefix}.${secret}.x`,
    'other tag': `tkn_${prefix.slice(4)}.${secret}`,
    'upper-case prefix': `tok_${prefix.slice(4).toUpperCase()}.${secret}`,
    'prefix with a digit outside base32': `tok_${prefix.slice(4, 11)}1.${secret}`,
    'short prefix': `${prefix.slice(0, 11)}.${secret}`,
    'short secret': `${prefix}.${secret.slice(1)}`,
    'long secret': `${prefix}.${secret}A`,
    'padded secret': `${prefix}.${secret}=`,
    'standard base64 characters': `${prefix}.${secret.slice(0, -2)}+/`,
    'leading space': ` ${good}`,
    'trailing newline': `${good}\n`,
    'non-canonical last character': nonCanonical,
    'Bearer kept': `Bearer ${good}`,
    'very long': 'x'.repeat(100_000),
    'not a string': 42,
    null: null,
  };
  for (const [label, value] of Object.entries(cases)) {
    t.equal(parseToken(value as string), null, label);
  }
  t.not(nonCanonical, good, 'the non-canonical case really differs');
  t.end();
});
