/**
 * The command line's vocabulary: its exit statuses, its usage text, the
 * error of a bad command line, and the parsed command with its settings,
 * shared by the parser (cli-args.ts) and the runner (cli.ts).
 */
import type { IntentState } from './outbox.js';

/** Exit statuses. */
export const EXIT = {
  /** Done: the command's intent got a 2xx; for a drain, everything got a final answer. */
  ok: 0,
  /**
   * The server's final answer to the command's intent is an error: a
   * stored 4xx marked with `Idempotent-Replay` (an unmarked one is never
   * taken for the server's refusal).
   */
  rejected: 1,
  /** A bad flag or environment variable. */
  usage: 2,
  /**
   * An intent failed: key reuse (422), an expired key, an unexpected answer,
   * an unknown outcome (a 2xx or a stored status without
   * `Idempotent-Replay` twice in a row, or an answer the API never gives
   * after an attempt that may have reached the server); or a key given
   * twice; or a drain
   * halted because a server `Date` and the local clock disagree (intents
   * with an attempt behind them stay pending until the clock is fixed).
   */
  failed: 3,
  /**
   * The outbox cannot be used: locked by another process, unreadable,
   * corrupt, damaged (any error of SQLite once it is open: a malformed
   * page, an I/O error, a full disk), another principal's.
   */
  outbox: 4,
  /** The server refused the token (401): intents stay pending for a good one. */
  unauthenticated: 5,
  /** A bug in the client (the message has the stack). */
  bug: 70,
  /**
   * Standard output could not be written (a closed pipe, a full disk): the
   * result was not seen. The command's intent is not marked reported, so
   * the same command again prints it instead of stating a second one.
   */
  output: 74,
  /** Still pending when `--wait` ran out: a later command or `outbox drain` sends it. */
  pending: 75,
  /** Interrupted by SIGINT or SIGTERM: intents stay pending. */
  interrupted: 130,
} as const;

/** The usage text, printed by `--help`. */
export const USAGE = `Usage:
  client transfer --from ID --to ID --amount N [--key UUIDv7] [--independent] [--again]
  client accounts create --name NAME [--opening-balance N] [--key UUIDv7] [--again]
  client outbox list [--state pending|done|failed]
  client outbox drain
  client --help

Every command (flag, or environment variable):
  --outbox FILE          CLIENT_OUTBOX       the outbox file (required; created when missing, but
                                             never by outbox list)
  --json                                     results as one JSON document, progress as JSON lines
A transfer or account creation equal to one still pending is refused (exit 3): deliver
that one with "client outbox drain" (or --key KEY); one equal to an intent settled but whose
result was never printed (its command was killed, or a drain settled it) is refused too
(exit 3): the same command with --key KEY prints its answer; --again states a second one,
except after an unknown outcome, which may have taken effect: do not state it again until a
check shows it did not.
Commands that send (transfer, accounts create, outbox drain):
  --base-url URL         CLIENT_BASE_URL     the server's origin, e.g. http://127.0.0.1:3000 (required)
  --token TOKEN          CLIENT_TOKEN        the bearer token (required; prefer the variable)
  --key-ttl DURATION     CLIENT_KEY_TTL      how long the server keeps keys; default what the server tells
                                             (Idempotency-Key-Lifetime), else 24h; the shorter of the two is used
  --ttl-margin DURATION  CLIENT_TTL_MARGIN   a key this much younger than the TTL is no longer sent, default 1h
  --timeout DURATION     CLIENT_TIMEOUT      one attempt's limit, default 30s
  --wait DURATION        CLIENT_WAIT         how long to keep repeating before leaving intents pending, default 30s
  --retry-base DURATION  CLIENT_RETRY_BASE   the first backoff step, default 200ms
  --retry-cap DURATION   CLIENT_RETRY_CAP    the largest backoff step, default 30s
  --concurrency N        CLIENT_CONCURRENCY  intents of different lanes in flight at once, default 4
Durations: an integer and ms, s, m, h or d (0 alone is zero).
Exit: 0 done, 1 refused by the server (a marked refusal), 2 usage, 3 failed (key reuse,
      expired, unexpected, outcome unknown, the server's clock and this one disagree),
      4 outbox unusable, 5 token refused, 75 still pending, 130 interrupted, 70 bug.`;

/** A command line the client cannot run; the message is one line naming the flag or variable. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Settings of every command. */
export interface CommonSettings {
  /** The outbox file. */
  readonly outbox: string;
  /** JSON output. */
  readonly json: boolean;
}

/** Settings of the commands that send. */
export interface SendSettings extends CommonSettings {
  readonly baseUrl: string;
  readonly token: string;
  /**
   * The key lifetime given (`--key-ttl`), an override of the server's
   * `Idempotency-Key-Lifetime`; undefined: the server's.
   */
  readonly keyTtlMs: number | undefined;
  readonly ttlMarginMs: number;
  readonly timeoutMs: number;
  readonly waitMs: number;
  readonly retryBaseMs: number;
  readonly retryCapMs: number;
  readonly concurrency: number;
}

/** A parsed command line. */
export type Command =
  | { readonly kind: 'help' }
  | {
      readonly kind: 'transfer';
      readonly settings: SendSettings;
      readonly from: string;
      readonly to: string;
      readonly amount: number;
      readonly key: string | undefined;
      readonly independent: boolean;
      /** State a new intent even when an equal one is pending or unreported. */
      readonly again: boolean;
    }
  | {
      readonly kind: 'accounts-create';
      readonly settings: SendSettings;
      readonly name: string;
      readonly openingBalance: number;
      readonly key: string | undefined;
      /** State a new intent even when an equal one is pending or unreported. */
      readonly again: boolean;
    }
  | {
      readonly kind: 'outbox-list';
      readonly settings: CommonSettings;
      readonly state: IntentState | undefined;
    }
  | { readonly kind: 'outbox-drain'; readonly settings: SendSettings };

/** The environment the command line reads (`process.env` in the entry point). */
export type Environment = Readonly<Record<string, string | undefined>>;
