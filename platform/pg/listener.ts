/**
 * A LISTEN session of its own: one connection that listens on one channel,
 * reports every notification, and says whether it is listening. When the
 * connection is lost it says so at once and listens again, with backoff,
 * until closed. Notifications sent while it was not listening are lost
 * (PostgreSQL keeps none for a session that is not there), so a consumer
 * that caches must drop what it holds when the listener comes back and must
 * not trust its cache while the listener is down.
 */
import postgres from 'postgres';
import { reconnectBackoff } from './client.js';

/** Options of {@link PgListener}. */
export interface PgListenerOptions {
  /** The channel to LISTEN on: a plain identifier (letters, digits, underscores). */
  readonly channel: string;
  /** Shown in pg_stat_activity, so an operator can tell the session apart. */
  readonly applicationName: string;
  /** Called with the payload of each notification on the channel. */
  readonly onNotify: (payload: string) => void;
  /**
   * Called with true once LISTEN has taken effect (the first time and after
   * each reconnect), and with false as soon as the session is lost.
   */
  readonly onState: (listening: boolean) => void;
  /** Called with an error that stopped an attempt to listen; the listener tries again. */
  readonly onError?: (err: unknown) => void;
  /** Longest wait between attempts to listen again, in milliseconds; default 2000. */
  readonly maxRetryMs?: number;
}

const CHANNEL = /^[a-z_][a-z0-9_]{0,62}$/;

/** One connection listening on one channel, reconnecting until closed. */
export class PgListener {
  readonly #sql: postgres.Sql;
  readonly #options: PgListenerOptions;
  #listening = false;
  #closed = false;
  #attempt: Promise<void> | undefined;
  #retry: NodeJS.Timeout | undefined;
  #failures = 0;

  /**
   * Prepares the listener; nothing connects before {@link start}.
   *
   * @param url a postgres:// connection URL (the application role's).
   * @param options channel, name and callbacks.
   * @throws RangeError when the channel is not a plain lower-case identifier.
   */
  constructor(url: string, options: PgListenerOptions) {
    if (!CHANNEL.test(options.channel)) {
      throw new RangeError(`channel must be a lower-case identifier, got "${options.channel}"`);
    }
    this.#options = options;
    // onnotify and onclose are options postgres.js reads (its own listen()
    // uses them) but does not declare in its types.
    const hooks = {
      onnotify: (channel: string, payload: string) => {
        if (channel === options.channel && this.#listening) options.onNotify(payload);
      },
      onclose: () => {
        this.#lost();
      },
    } as object;
    this.#sql = postgres(url, {
      ...hooks,
      max: 1,
      idle_timeout: 0,
      max_lifetime: 0,
      fetch_types: false,
      backoff: reconnectBackoff,
      onnotice: () => undefined,
      connection: { application_name: options.applicationName },
    });
  }

  /** Whether LISTEN is in effect on a live session now. */
  get listening(): boolean {
    return this.#listening;
  }

  /**
   * Starts listening. Resolves once the first attempt has ended, whether it
   * succeeded or not: a database that is down does not stop the caller,
   * and the listener keeps trying.
   *
   * @returns when the first attempt is over.
   */
  start(): Promise<void> {
    return this.#listen();
  }

  /** Stops listening and closes the session. Closing twice does nothing. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#retry);
    this.#set(false);
    await this.#attempt;
    await this.#sql.end({ timeout: 1 });
  }

  #set(listening: boolean): void {
    if (this.#listening === listening) return;
    this.#listening = listening;
    this.#options.onState(listening);
  }

  #lost(): void {
    this.#set(false);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#closed || this.#retry !== undefined || this.#attempt !== undefined) return;
    const max = this.#options.maxRetryMs ?? 2_000;
    const wait = Math.min(max, 50 * 2 ** Math.min(this.#failures, 10)) * (0.5 + Math.random() / 2);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      void this.#listen();
    }, wait);
    this.#retry.unref();
  }

  #listen(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#attempt ??= (async () => {
      try {
        await this.#sql.unsafe(`listen ${this.#options.channel}`);
        this.#failures = 0;
        if (!this.#closed) this.#set(true);
      } catch (err) {
        this.#failures += 1;
        this.#set(false);
        if (!this.#closed) this.#options.onError?.(err);
      } finally {
        this.#attempt = undefined;
      }
      if (!this.#listening) this.#schedule();
    })();
    return this.#attempt;
  }
}
