/**
 * Two refusals of the command line's parser (cli-args.ts), kept apart so
 * it stays one screenful per job: node:util parseArgs errors as one line
 * naming the flag, and a token no HTTP header can carry.
 */
import { UsageError } from './cli-command.js';

/** A setting's value and where it came from, for messages. */
export interface Source {
  readonly text: string;
  /** `--flag`, the variable's name, or `--flag (default)`. */
  readonly name: string;
}

/**
 * One line for an error of node:util `parseArgs`.
 *
 * @param err what parseArgs threw.
 * @returns `unknown flag --x`, `--x needs a value`, or the error's first line.
 */
export function parseArgsMessage(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  const text = err instanceof Error ? err.message : String(err);
  const option = /'(-[^' ]+)/.exec(text)?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option !== undefined) {
    return `unknown flag ${option}`;
  }
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option !== undefined) {
    return /ambiguous/.test(text)
      ? `${option}: write a value that starts with "-" as ${option}=VALUE`
      : `${option} needs a value`;
  }
  return text.split('\n')[0] ?? text;
}

/**
 * Checks the token before anything is sent: it goes out as
 * `Authorization: Bearer <token>`, and a byte Node.js refuses in a header
 * would otherwise fail every attempt as if the server were unreachable.
 * The token is never echoed.
 *
 * @param token where the token came from, and its text.
 * @throws UsageError naming the flag or variable when it holds a space, a
 *   line end or a character outside printable ASCII.
 */
export function bearerToken(token: Source): void {
  if (/^[\x21-\x7e]+$/.test(token.text)) return;
  const why = /[\r\n]/.test(token.text)
    ? 'a carriage return or line feed (a token file saved with a Windows line end?)'
    : 'a space or a character outside ASCII';
  throw new UsageError(
    `${token.name} must be printable ASCII without spaces (a bearer token); it holds ${why}`,
  );
}
