/**
 * Runs the quickstart's shell sequence (what `make run` prints and the README
 * shows) with fetch instead of a shell, so the tests that check it need
 * neither curl nor sed. It understands exactly the shell the sequence uses,
 * and refuses anything else, so a README edit that this runner cannot follow
 * fails the test instead of being skipped:
 *
 * - blank lines, `# comments` and lines continued with a trailing backslash;
 * - `NAME=word` assignments;
 * - `NAME=$(curl ... | sed -E 's/REGEX/REPLACEMENT/')` captures;
 * - `NAME=$(sed -E 's/REGEX/REPLACEMENT/' FILE)` captures of a file;
 * - `curl` with `-s`, `-i`, `-w FORMAT`, `-X METHOD`, `-H 'Name: value'`,
 *   `-d BODY` and one URL;
 * - words in single quotes, double quotes (with `\"`, `\\`, `\$` and
 *   `$NAME` or `${NAME}` expansion) or bare (with `$NAME` expansion).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { projectRoot } from '../../platform/migrate/index.js';

/** A piece of a shell word: literal text or a variable expanded at run time. */
type Part = { readonly text: string } | { readonly variable: string };

/** A shell word, or the pipe operator between two commands. */
type Token = { readonly kind: 'word'; readonly parts: readonly Part[] } | { readonly kind: 'pipe' };

/** A curl command, its words not yet expanded. */
interface Curl {
  readonly method: readonly Part[] | undefined;
  readonly url: readonly Part[];
  readonly headers: readonly (readonly Part[])[];
  readonly body: readonly Part[] | undefined;
  readonly includeHeaders: boolean;
  readonly writeOut: readonly Part[] | undefined;
}

/** One line of the sequence. */
type Step =
  | { readonly kind: 'assign'; readonly name: string; readonly value: readonly Part[] }
  | {
      readonly kind: 'capture';
      readonly name: string;
      readonly curl: Curl;
      readonly sed: { readonly pattern: RegExp; readonly replacement: string };
    }
  | {
      readonly kind: 'read';
      readonly name: string;
      readonly file: readonly Part[];
      readonly sed: { readonly pattern: RegExp; readonly replacement: string };
    }
  | { readonly kind: 'curl'; readonly curl: Curl };

/** What one curl command of the sequence did. */
export interface CurlResult {
  /** The command as written (continuations joined). */
  readonly source: string;
  readonly method: string;
  readonly url: string;
  readonly requestHeaders: Readonly<Record<string, string>>;
  readonly requestBody: string | undefined;
  readonly status: number;
  readonly headers: Headers;
  /** The response body, byte for byte (as text). */
  readonly body: string;
  /** What the command would print (status line and headers with `-i`, the body, `-w`). */
  readonly output: string;
}

/** The outcome of {@link runScript}. */
export interface ScriptRun {
  /** Every curl command, in order. */
  readonly results: readonly CurlResult[];
  /** The shell variables at the end. */
  readonly variables: ReadonlyMap<string, string>;
}

/**
 * Reads the first `sh` code block after the `## Quickstart` heading of the
 * project's README.
 *
 * @returns the block's text, ending with a newline.
 * @throws Error when there is no such heading or block.
 */
export async function readmeQuickstart(): Promise<string> {
  const readme = await fs.readFile(path.join(projectRoot(), 'README.md'), 'utf8');
  const heading = readme.indexOf('\n## Quickstart\n');
  if (heading < 0) throw new Error('README.md has no "## Quickstart" section');
  const match = /\n```sh\n([\s\S]*?)\n```\n/.exec(readme.slice(heading));
  if (match?.[1] === undefined) throw new Error('the Quickstart section has no sh code block');
  return `${match[1]}\n`;
}

/**
 * Cuts the quickstart sequence out of what the server printed: from the
 * line starting with `# 1.` to the first blank line after the last command.
 *
 * @param stdout the server's standard output (JSON log lines are skipped).
 * @returns the sequence, ending with a newline.
 * @throws Error when no sequence was printed.
 */
export function printedQuickstart(stdout: string): string {
  const lines = stdout.split('\n').filter((l) => !l.startsWith('{'));
  const start = lines.findIndex((l) => l.startsWith('# 1. '));
  if (start < 0) throw new Error(`no quickstart in the output:\n${stdout}`);
  const rest = lines.slice(start);
  const last = rest.findIndex((l, i) => l.startsWith('curl ') && rest[i + 1] === '');
  if (last < 0) throw new Error(`the quickstart in the output is incomplete:\n${stdout}`);
  return `${rest.slice(0, last + 1).join('\n')}\n`;
}

function tokenize(line: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  const variableAt = (at: number): { name: string; end: number } | undefined => {
    const braced = /^\{([A-Za-z_][A-Za-z0-9_]*)\}/.exec(line.slice(at));
    if (braced?.[1] !== undefined) return { name: braced[1], end: at + braced[0].length };
    const plain = /^[A-Za-z_][A-Za-z0-9_]*/.exec(line.slice(at));
    return plain ? { name: plain[0], end: at + plain[0].length } : undefined;
  };
  while (i < line.length) {
    const c = line.charAt(i);
    if (c === ' ' || c === '\t') {
      i += 1;
      continue;
    }
    if (c === '|') {
      tokens.push({ kind: 'pipe' });
      i += 1;
      continue;
    }
    const parts: Part[] = [];
    const text = (t: string): void => {
      const prev = parts.at(-1);
      if (prev !== undefined && 'text' in prev) parts[parts.length - 1] = { text: prev.text + t };
      else parts.push({ text: t });
    };
    while (i < line.length && !' \t|'.includes(line.charAt(i))) {
      const ch = line.charAt(i);
      if (ch === "'") {
        const end = line.indexOf("'", i + 1);
        if (end < 0) throw new Error(`unterminated single quote in: ${line}`);
        text(line.slice(i + 1, end));
        i = end + 1;
      } else if (ch === '"') {
        i += 1;
        while (line.charAt(i) !== '"') {
          if (i >= line.length) throw new Error(`unterminated double quote in: ${line}`);
          const d = line.charAt(i);
          if (d === '\\' && '"\\$'.includes(line.charAt(i + 1))) {
            text(line.charAt(i + 1));
            i += 2;
          } else if (d === '$' && variableAt(i + 1) !== undefined) {
            const v = variableAt(i + 1);
            parts.push({ variable: v?.name ?? '' });
            i = v?.end ?? i + 1;
          } else {
            text(d);
            i += 1;
          }
        }
        i += 1;
      } else if (ch === '$' && variableAt(i + 1) !== undefined) {
        const v = variableAt(i + 1);
        parts.push({ variable: v?.name ?? '' });
        i = v?.end ?? i + 1;
      } else if (ch === '\\') {
        text(line.charAt(i + 1));
        i += 2;
      } else if ('();&<>`$'.includes(ch)) {
        throw new Error(`unsupported shell syntax "${ch}" in: ${line}`);
      } else {
        text(ch);
        i += 1;
      }
    }
    tokens.push({ kind: 'word', parts });
  }
  return tokens;
}

function literal(parts: readonly Part[]): string {
  return parts.map((p) => ('text' in p ? p.text : `$${p.variable}`)).join('');
}

function words(tokens: readonly Token[], line: string): (readonly Part[])[] {
  return tokens.map((t) => {
    if (t.kind === 'pipe') throw new Error(`unexpected pipe in: ${line}`);
    return t.parts;
  });
}

function parseCurl(args: readonly (readonly Part[])[], line: string): Curl {
  if (args[0] === undefined || literal(args[0]) !== 'curl') {
    throw new Error(`only curl commands are understood, got: ${line}`);
  }
  let method: readonly Part[] | undefined;
  let url: readonly Part[] | undefined;
  let body: readonly Part[] | undefined;
  let writeOut: readonly Part[] | undefined;
  let includeHeaders = false;
  const headers: (readonly Part[])[] = [];
  for (let i = 1; i < args.length; i += 1) {
    const arg = args[i] ?? [];
    const flag = literal(arg);
    const value = (): readonly Part[] => {
      i += 1;
      const v = args[i];
      if (v === undefined) throw new Error(`${flag} needs a value in: ${line}`);
      return v;
    };
    if (flag === '-s') continue;
    if (flag === '-i') includeHeaders = true;
    else if (flag === '-X') method = value();
    else if (flag === '-H') headers.push(value());
    else if (flag === '-d') body = value();
    else if (flag === '-w') writeOut = value();
    else if (flag.startsWith('-')) throw new Error(`unsupported curl option ${flag} in: ${line}`);
    else if (url === undefined) url = arg;
    else throw new Error(`a second URL in: ${line}`);
  }
  if (url === undefined) throw new Error(`no URL in: ${line}`);
  return { method, url, headers, body, includeHeaders, writeOut };
}

function parseSed(
  args: readonly (readonly Part[])[],
  line: string,
): Extract<Step, { kind: 'capture' }>['sed'] {
  const [command, option, script, ...rest] = args.map(literal);
  if (command !== 'sed' || option !== '-E' || script === undefined || rest.length > 0) {
    throw new Error(`only "sed -E 's/REGEX/REPLACEMENT/' [FILE]" is understood, got: ${line}`);
  }
  const m = /^s\/((?:[^/\\]|\\.)*)\/((?:[^/\\]|\\.)*)\/$/.exec(script);
  if (m?.[1] === undefined || m[2] === undefined) {
    throw new Error(`unsupported sed script in: ${line}`);
  }
  return { pattern: new RegExp(m[1]), replacement: m[2].replace(/\\(\d)/g, '$$$1') };
}

/**
 * Parses a sequence into steps.
 *
 * @param script the shell text.
 * @returns the steps, in order.
 * @throws Error naming the first line the runner does not understand.
 */
function parseScript(script: string): { source: string; step: Step }[] {
  const logical = script.replace(/\\\n/g, ' ').split('\n');
  const steps: { source: string; step: Step }[] = [];
  for (const raw of logical) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const capture = /^([A-Za-z_][A-Za-z0-9_]*)=\$\((.*)\)$/.exec(line);
    if (capture?.[1] !== undefined && capture[2] !== undefined) {
      const tokens = tokenize(capture[2]);
      const pipe = tokens.findIndex((t) => t.kind === 'pipe');
      const first = tokens[0];
      if (pipe < 0 && first?.kind === 'word' && literal(first.parts) === 'sed') {
        const args = words(tokens, line);
        const file = args[3];
        if (file === undefined) throw new Error(`sed without a file: ${line}`);
        steps.push({
          source: line,
          step: { kind: 'read', name: capture[1], file, sed: parseSed(args.slice(0, 3), line) },
        });
        continue;
      }
      if (pipe < 0) throw new Error(`a capture without sed: ${line}`);
      steps.push({
        source: line,
        step: {
          kind: 'capture',
          name: capture[1],
          curl: parseCurl(words(tokens.slice(0, pipe), line), line),
          sed: parseSed(words(tokens.slice(pipe + 1), line), line),
        },
      });
      continue;
    }
    const assign = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (assign?.[1] !== undefined && assign[2] !== undefined) {
      const value = words(tokenize(assign[2]), line);
      if (value.length !== 1 || value[0] === undefined) {
        throw new Error(`an assignment of one word expected: ${line}`);
      }
      steps.push({ source: line, step: { kind: 'assign', name: assign[1], value: value[0] } });
      continue;
    }
    steps.push({
      source: line,
      step: { kind: 'curl', curl: parseCurl(words(tokenize(line), line), line) },
    });
  }
  return steps;
}

function expand(parts: readonly Part[], variables: ReadonlyMap<string, string>): string {
  return parts
    .map((p) => {
      if ('text' in p) return p.text;
      const v = variables.get(p.variable);
      if (v === undefined) throw new Error(`variable ${p.variable} is not set`);
      return v;
    })
    .join('');
}

async function runCurl(
  source: string,
  curl: Curl,
  variables: ReadonlyMap<string, string>,
): Promise<CurlResult> {
  const url = expand(curl.url, variables);
  const requestBody = curl.body === undefined ? undefined : expand(curl.body, variables);
  const method =
    curl.method === undefined
      ? requestBody === undefined
        ? 'GET'
        : 'POST'
      : expand(curl.method, variables);
  const requestHeaders: Record<string, string> = {};
  for (const h of curl.headers) {
    const text = expand(h, variables);
    const colon = text.indexOf(':');
    if (colon <= 0) throw new Error(`a header without a name: ${text}`);
    requestHeaders[text.slice(0, colon).trim()] = text.slice(colon + 1).trim();
  }
  if (
    requestBody !== undefined &&
    !Object.keys(requestHeaders).some((k) => /^content-type$/i.test(k))
  ) {
    // What curl sends with -d when no Content-Type is given.
    requestHeaders['Content-Type'] = 'application/x-www-form-urlencoded';
  }
  const res = await fetch(url, {
    method,
    headers: requestHeaders,
    ...(requestBody === undefined ? {} : { body: requestBody }),
  });
  const body = await res.text();
  const head = curl.includeHeaders
    ? `HTTP/1.1 ${String(res.status)} ${res.statusText}\n${[...res.headers]
        .map(([k, v]) => `${k}: ${v}`)
        .join('\n')}\n\n`
    : '';
  const tail =
    curl.writeOut === undefined ? '' : expand(curl.writeOut, variables).replace(/\\n/g, '\n');
  return {
    source,
    method,
    url,
    requestHeaders,
    requestBody,
    status: res.status,
    headers: res.headers,
    body,
    output: head + body + tail,
  };
}

/**
 * Runs a quickstart sequence, one command after the other.
 *
 * @param script the shell text (from the README or the server's output).
 * @param overrides variables whose assignments in the text are replaced,
 *   e.g. `{ BASE, TOKEN }` of the server under test.
 * @returns every curl command's request and answer, and the final variables.
 * @throws Error for a line it does not understand or an unset variable.
 */
export async function runScript(
  script: string,
  overrides: Readonly<Record<string, string>> = {},
): Promise<ScriptRun> {
  const variables = new Map<string, string>();
  const results: CurlResult[] = [];
  for (const { source, step } of parseScript(script)) {
    if (step.kind === 'assign') {
      variables.set(step.name, overrides[step.name] ?? expand(step.value, variables));
    } else if (step.kind === 'read') {
      const override = overrides[step.name];
      const text =
        override ??
        (await fs.readFile(expand(step.file, variables), 'utf8'))
          .split('\n')
          .map((l) => l.replace(step.sed.pattern, step.sed.replacement))
          .join('\n')
          .replace(/\n+$/, '');
      variables.set(step.name, text);
    } else if (step.kind === 'capture') {
      const result = await runCurl(source, step.curl, variables);
      results.push(result);
      const captured = result.output
        .split('\n')
        .map((l) => l.replace(step.sed.pattern, step.sed.replacement))
        .join('\n')
        .replace(/\n+$/, '');
      variables.set(step.name, captured);
    } else {
      results.push(await runCurl(source, step.curl, variables));
    }
  }
  return { results, variables };
}
