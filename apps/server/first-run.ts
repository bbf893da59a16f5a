/**
 * The first-run experience of `make run`: on the embedded PostgreSQL, the
 * api listener makes sure a local principal exists, keeps its token next to
 * the embedded data (so a restart uses it again) and prints, on standard
 * error, a copy-paste curl sequence that reads the token from that file (the
 * token itself is never printed: standard output carries the JSON log lines,
 * and a terminal's scrollback is no place for a credential). The sequence
 * opens two accounts, moves money once and repeats the transfer to show the
 * stored answer coming back with `Idempotent-Replay: true`. The README's quickstart is this sequence, and a test keeps the two
 * equal.
 *
 * Whether the local principal exists is told by the token file and the
 * identity module's ports (authenticator and directory), never by its tables:
 * the file is written in the same data directory as the database, so a wiped
 * database leaves no file behind, and a file whose principal the directory no
 * longer knows (the database was recreated) is replaced.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Authenticator, PrincipalDirectory } from '../../kernel/actor/index.js';
import type { Clock } from '../../kernel/clock/index.js';
import { isUuid, newId, type Id } from '../../kernel/ids/index.js';
import type { NewPrincipalInput, NewPrincipalResult } from '../../modules/identity/index.js';

/** Display name of the principal the first run creates. */
export const LOCAL_PRINCIPAL_NAME = 'Local developer';

/** Name of the token file, inside `database.embedded_data_dir`. */
export const LOCAL_PRINCIPAL_FILE = 'local-principal.json';

/** Opening balances and the amount of the quickstart, in minor units. */
export const QUICKSTART_AMOUNTS = Object.freeze({
  openingA: 10_000,
  openingB: 0,
  transfer: 2_500,
});

/** The Idempotency-Key values the printed sequence uses (UUIDv7). */
export interface QuickstartKeys {
  /** Opens account A. */
  readonly accountA: string;
  /** Opens account B. */
  readonly accountB: string;
  /** The transfer, sent twice. */
  readonly transfer: string;
}

/** What the printed sequence is filled in with. */
export interface QuickstartValues {
  /** Where the api listener answers, e.g. `http://127.0.0.1:3000`. */
  readonly baseUrl: string;
  /**
   * The token file of the caller ({@link localPrincipalFile}): the sequence
   * reads the bearer token from it, so the token itself is never printed.
   */
  readonly tokenFile: string;
  /** The idempotency keys of the three keyed requests. */
  readonly keys: QuickstartKeys;
}

/**
 * Makes fresh keys for one printing of the sequence: each start of the
 * server prints new ones, so running a freshly printed sequence opens new
 * accounts, while running the same one twice replays every keyed request.
 *
 * @param clock the kernel clock, which stamps the UUIDv7 keys.
 * @returns three distinct UUIDv7 keys.
 */
export function newQuickstartKeys(clock: Clock): QuickstartKeys {
  const now = clock.now();
  return { accountA: newId(now), accountB: newId(now), transfer: newId(now) };
}

/**
 * Quotes a path for sh: bare when it holds only characters no shell treats
 * specially, else in single quotes (a single quote inside written `'\''`).
 *
 * @param file the path.
 * @returns the shell word.
 */
export function shellWord(file: string): string {
  return /^[A-Za-z0-9_./-]+$/.test(file) ? file : `'${file.replace(/'/g, `'\\''`)}'`;
}

/**
 * Renders the copy-paste shell sequence of the quickstart: five commented
 * steps for sh-compatible shells with curl and sed. The token is read from
 * its file by the sequence (tokens are `tok_` followed by letters, digits,
 * `-`, `_` and `.`, so sed can cut it out of the JSON).
 *
 * @param values base URL, token file and keys.
 * @returns the sequence, ending with a newline.
 * @example
 * process.stderr.write(quickstartScript({ baseUrl, tokenFile, keys: newQuickstartKeys(clock) }));
 */
export function quickstartScript(values: QuickstartValues): string {
  const { openingA, openingB, transfer } = QUICKSTART_AMOUNTS;
  const auth = `-H "Authorization: Bearer $TOKEN"`;
  const json = `-H 'Content-Type: application/json'`;
  const takeId = `sed -E 's/.*"id":"([^"]+)".*/\\1/'`;
  const open = (variable: string, key: string, name: string, opening: number): string =>
    `${variable}=$(curl -s -X POST "$BASE/api/v1/accounts" ${auth} \\\n` +
    `  ${json} -H 'Idempotency-Key: ${key}' \\\n` +
    `  -d '{"name":"${name}","opening_balance":${String(opening)}}' | ${takeId})\n`;
  const move =
    `curl -s -i -w '\\n' -X POST "$BASE/api/v1/transfers" ${auth} \\\n` +
    `  ${json} -H 'Idempotency-Key: ${values.keys.transfer}' \\\n` +
    `  -d "{\\"from_account_id\\":\\"$A\\",\\"to_account_id\\":\\"$B\\",\\"amount\\":${String(transfer)}}"\n`;
  const read = (variable: string): string =>
    `curl -s -w '\\n' "$BASE/api/v1/accounts/$${variable}" ${auth}\n`;
  return (
    `# 1. Where the server listens, and the token of the local principal (read from its file).\n` +
    `BASE=${values.baseUrl}\n` +
    `TOKEN=$(sed -E 's/.*"token":"([^"]+)".*/\\1/' ${shellWord(values.tokenFile)})\n` +
    `\n` +
    `# 2. Open two accounts (amounts are integers in minor units); keep their ids.\n` +
    open('A', values.keys.accountA, 'Checking', openingA) +
    open('B', values.keys.accountB, 'Savings', openingB) +
    `\n` +
    `# 3. Move ${String(transfer)} from A to B: 201 Created.\n` +
    move +
    `\n` +
    `# 4. The same request again, same key: the stored answer, Idempotent-Replay: true.\n` +
    move +
    `\n` +
    `# 5. The money moved once: A holds ${String(openingA - transfer)}, B holds ${String(openingB + transfer)}.\n` +
    read('A') +
    read('B')
  );
}

/** The identity module's public operations the first run uses. */
export interface FirstRunIdentity {
  /** Tells whether the saved token still works. */
  readonly authenticator: Authenticator;
  /** Tells whether the saved principal still exists. */
  readonly directory: PrincipalDirectory;
  /** Creates the local principal and its first token. */
  createPrincipalWithToken(input: NewPrincipalInput): Promise<NewPrincipalResult>;
}

/** What {@link ensureLocalPrincipal} needs. */
export interface LocalPrincipalDeps {
  /** The identity module (ports and the create operation). */
  readonly identity: FirstRunIdentity;
  /** The kernel clock, against which the saved token is checked. */
  readonly clock: Clock;
  /** The token file, e.g. {@link localPrincipalFile} of the embedded data directory. */
  readonly file: string;
}

/** The outcome of {@link ensureLocalPrincipal}. */
export type LocalPrincipal =
  | {
      /** `created`: made now; `saved`: the token file's principal and token still work. */
      readonly kind: 'created' | 'saved';
      readonly principalId: Id;
      readonly token: string;
    }
  | {
      /** The file names a principal that exists but its token no longer works. */
      readonly kind: 'unusable';
      /** Why, fit to print. */
      readonly reason: string;
    };

/** The token file's content. */
interface SavedPrincipal {
  readonly principal_id: string;
  readonly token: string;
}

/**
 * Where the local principal's token is kept: inside the embedded server's
 * data directory, so it lives and dies with the database it belongs to.
 *
 * @param embeddedDataDir `database.embedded_data_dir`, relative to the
 *   working directory or absolute.
 * @returns the absolute path of the token file.
 */
export function localPrincipalFile(embeddedDataDir: string): string {
  return path.join(path.resolve(embeddedDataDir), LOCAL_PRINCIPAL_FILE);
}

async function readSaved(file: string): Promise<SavedPrincipal | undefined | 'invalid'> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    const parsed = JSON.parse(text) as Partial<SavedPrincipal> | null;
    if (
      typeof parsed?.principal_id === 'string' &&
      isUuid(parsed.principal_id) &&
      typeof parsed.token === 'string'
    ) {
      return { principal_id: parsed.principal_id, token: parsed.token };
    }
  } catch {
    // Reported below like any other malformed content.
  }
  return 'invalid';
}

async function save(file: string, saved: SavedPrincipal): Promise<void> {
  // Written beside and renamed over, so a crash never leaves half a file;
  // mode 0600 because the token is a credential.
  const temporary = `${file}.${String(process.pid)}.tmp`;
  await fs.writeFile(temporary, `${JSON.stringify(saved)}\n`, { mode: 0o600, flag: 'w' });
  await fs.chmod(temporary, 0o600);
  await fs.rename(temporary, file);
}

/**
 * Makes sure the local principal exists and its token is saved: reuses the
 * saved one while it authenticates, creates one (display name
 * {@link LOCAL_PRINCIPAL_NAME}) when there is no file or the directory no
 * longer knows the saved principal, and otherwise (a revoked token, a
 * disabled principal, an unreadable file) creates nothing and says why, so a
 * principal someone disabled on purpose is not silently replaced.
 *
 * @param deps the identity module, the clock and the token file.
 * @returns the principal and its token, or why the saved one cannot be used.
 * @throws the file system's or the database's error when reading, creating
 *   or saving fails.
 */
export async function ensureLocalPrincipal(deps: LocalPrincipalDeps): Promise<LocalPrincipal> {
  const saved = await readSaved(deps.file);
  if (saved === 'invalid') {
    return {
      kind: 'unusable',
      reason: `${deps.file} is not a saved principal; delete it and restart to create a new one.`,
    };
  }
  if (saved !== undefined) {
    const actor = await deps.identity.authenticator.authenticate(saved.token, deps.clock.now());
    if (actor !== null && actor.principalId === saved.principal_id) {
      return { kind: 'saved', principalId: actor.principalId, token: saved.token };
    }
    if ((await deps.identity.directory.find(saved.principal_id as Id)) !== null) {
      return {
        kind: 'unusable',
        reason:
          `the token saved in ${deps.file} no longer authenticates (revoked, expired or its ` +
          `principal disabled); delete the file and restart to create a new principal.`,
      };
    }
  }
  const created = await deps.identity.createPrincipalWithToken({
    displayName: LOCAL_PRINCIPAL_NAME,
    kind: 'user',
    tokenName: 'make run',
  });
  await save(deps.file, { principal_id: created.principalId, token: created.token });
  return { kind: 'created', principalId: created.principalId, token: created.token };
}

/** What {@link firstRunBanner} needs besides {@link LocalPrincipalDeps}. */
export interface BannerDeps extends LocalPrincipalDeps {
  /** `app.name`, shown in the first line. */
  readonly appName: string;
  /** The process role, `api` or `all`. */
  readonly role: string;
  /** The listener's address, as `listen()` returned it. */
  readonly address: string;
}

/**
 * Makes sure the local principal exists and renders what `make run` prints
 * once the api listener is up: where it listens, whose token it is and the
 * quickstart sequence with fresh keys.
 *
 * @param deps the identity module, clock, token file, app name, role and address.
 * @returns the text to write to standard output.
 * @throws as {@link ensureLocalPrincipal}.
 */
export async function firstRunBanner(deps: BannerDeps): Promise<string> {
  const local = await ensureLocalPrincipal(deps);
  const head =
    `\n${deps.appName} is up (role ${deps.role}) on ${deps.address}\n` +
    `  Ctrl-C stops the server and its embedded PostgreSQL.\n\n`;
  if (local.kind === 'unusable') {
    return `${head}No quickstart: ${local.reason}\n\n`;
  }
  const origin =
    local.kind === 'created'
      ? `Created the principal "${LOCAL_PRINCIPAL_NAME}" (${local.principalId}).`
      : `Using the principal "${LOCAL_PRINCIPAL_NAME}" (${local.principalId}) made by an earlier run.`;
  return (
    `${head}${origin} Its token is kept in ${deps.file} (mode 0600), ` +
    `never printed.\nTry the API (copy and paste into a shell):\n\n` +
    quickstartScript({
      baseUrl: deps.address,
      tokenFile: deps.file,
      keys: newQuickstartKeys(deps.clock),
    }) +
    `\n`
  );
}
