/**
 * A LISTEN session of its own: one connection that listens on one channel,
 * reports every notification, and says whether it is listening. When the
 * connection is lost it says so at once and listens again, with backoff,
 * until closed. Notifications sent while it was not listening are lost
 * (PostgreSQL keeps none for a session that is not there), so a consumer
 * that caches must drop what it holds when the listener comes back and must
 * not trust its cache while the listener is down.
 *
 * A session can also stay up and hear nothing: a silent partition, a TCP
 * proxy that stopped forwarding, a transaction-mode pooler. With a
 * heartbeat, the listener proves it still hears: every interval it sends
 * `pg_notify(channel, 'hb:<instance>:<seq>')` over another connection, and
 * it reports not live when the latest heartbeat is not heard within the
 * timeout of its sending, or could not be sent. PostgreSQL delivers notices
 * in commit order, so hearing heartbeat k proves every notice committed
 * before it arrived; hearing one again makes it live again.
 */
import { randomUUID } from 'node:crypto';
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
  /** Longest {@link PgListener.start} waits, in milliseconds; default 2000. */
  readonly startTimeoutMs?: number;
  /**
   * Proves the session still hears (see the module comment); without it the
   * listener is live whenever LISTEN is in effect.
   */
  readonly heartbeat?: PgListenerHeartbeat;
}

/** The heartbeat of a {@link PgListener}. */
export interface PgListenerHeartbeat {
  /** Time between heartbeats, in milliseconds; default 1000. */
  readonly intervalMs?: number;
  /** How long after its sending a heartbeat must be heard, in milliseconds; default 2000. */
  readonly timeoutMs?: number;
  /**
   * Sends `pg_notify(channel, payload)`. By default the listener sends over a
   * second connection of its own (named `<applicationName>-heartbeat`), so
   * that a busy or broken application pool does not count; a send that
   * fails counts as a heartbeat not heard.
   */
  readonly send?: (channel: string, payload: string) => Promise<unknown>;
}

/** The payload of a heartbeat: `hb:<instance>:<seq>`. Never passed to onNotify. */
const HEARTBEAT = /^hb:([^:]*):(\d+)$/;

const CHANNEL = /^[a-z_][a-z0-9_]{0,62}$/;
/** Seconds a connection attempt of the listener (or its heartbeat) may take. */
const CONNECT_TIMEOUT_S = 5;
/**
 * How long a session must have stayed up, in milliseconds, for its loss to
 * start the backoff afresh: a session killed right after LISTEN counts as a
 * failure, so it is not opened again in a tight loop.
 */
const STABLE_MS = 30_000;
/** After a notice the consumer failed to take (onNotify threw), not live for this long without a heartbeat. */
const UNHEARD_MS = 100;

/** The options of the listener's own connections: one each, kept open, quiet. */
function oneConnection() {
  return {
    max: 1,
    idle_timeout: 0,
    max_lifetime: 0,
    fetch_types: false,
    connect_timeout: CONNECT_TIMEOUT_S,
    backoff: reconnectBackoff,
    onnotice: () => undefined,
  };
}

/** One connection listening on one channel, reconnecting until closed. */
export class PgListener {
  readonly #sql: postgres.Sql;
  readonly #options: PgListenerOptions;
  #listening = false;
  #closed = false;
  #attempt: Promise<void> | undefined;
  #retry: NodeJS.Timeout | undefined;
  #failures = 0;
  /** LISTEN is in effect on the live session. */
  #session = false;
  readonly #beat: Required<PgListenerHeartbeat> | undefined;
  readonly #beatSql: postgres.Sql | undefined;
  readonly #instance = randomUUID();
  #beatTimer: NodeJS.Timeout | undefined;
  /** Deadlines of the heartbeats sent and not heard yet, by seq. */
  readonly #deadlines = new Map<number, NodeJS.Timeout>();
  #sentSeq = 0;
  /** The highest seq that failed: not sent, or not heard in time. */
  #failedSeq = 0;
  /** Whether the latest heartbeat was heard, and every notice taken by the consumer. */
  #heard = true;
  /** When LISTEN last took effect (performance.now). */
  #upAt = 0;
  #unheardTimer: NodeJS.Timeout | undefined;
  /** Callers of start() waiting for the first time live. */
  readonly #liveWaiters: (() => void)[] = [];

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
        if (channel !== options.channel || !this.#session) return;
        const beat = HEARTBEAT.exec(payload);
        if (beat !== null) {
          if (beat[1] === this.#instance) this.#heardBeat(Number(beat[2]));
          return;
        }
        try {
          options.onNotify(payload);
        } catch (err) {
          // The consumer missed a change: not live until a fresh proof.
          this.#report(err);
          this.#unheard();
        }
      },
      onclose: () => {
        this.#lost();
      },
    } as object;
    this.#sql = postgres(url, {
      ...hooks,
      ...oneConnection(),
      connection: { application_name: options.applicationName },
    });
    const beat = options.heartbeat;
    if (beat !== undefined) {
      const timeoutMs = beat.timeoutMs ?? 2_000;
      let send = beat.send;
      if (send === undefined) {
        const sql = postgres(url, {
          ...oneConnection(),
          connection: {
            application_name: `${options.applicationName}-heartbeat`,
            statement_timeout: timeoutMs,
          },
        });
        this.#beatSql = sql;
        send = (channel, payload) => sql`select pg_notify(${channel}, ${payload})`.execute();
      }
      this.#beat = { intervalMs: beat.intervalMs ?? 1_000, timeoutMs, send };
    }
  }

  /** Whether LISTEN is in effect on a live session now. */
  get listening(): boolean {
    return this.#listening;
  }

  /**
   * Starts listening. Resolves once it is live (with a heartbeat: once the
   * first is heard), once the first attempt has failed, or after
   * `startTimeoutMs` at the latest: a database that is down, or accepts
   * and drops connections, does not hold the caller, and the listener
   * keeps trying.
   *
   * @returns when it is live, the first attempt failed, or the bound passed.
   */
  async start(): Promise<void> {
    let bound: NodeJS.Timeout | undefined;
    const first = this.#listen().then(() =>
      this.#session && !this.#listening
        ? new Promise<void>((resolve) => this.#liveWaiters.push(resolve))
        : undefined,
    );
    try {
      await Promise.race([
        first,
        new Promise<void>((resolve) => {
          bound = setTimeout(resolve, this.#options.startTimeoutMs ?? 2_000);
        }),
      ]);
    } finally {
      clearTimeout(bound);
    }
  }

  /**
   * Stops listening and closes the session: the connections are ended
   * first, so an attempt under way (a connection being opened) ends with
   * them instead of running into its timeout. Closing twice does nothing.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#retry);
    clearTimeout(this.#unheardTimer);
    this.#down();
    for (const resolve of this.#liveWaiters.splice(0)) resolve();
    await Promise.all([this.#sql.end({ timeout: 1 }), this.#beatSql?.end({ timeout: 1 })]);
    await this.#attempt;
  }

  /** Tells onError, which must not throw back into the listener. */
  #report(err: unknown): void {
    try {
      this.#options.onError?.(err);
    } catch {
      // A failing error callback has nobody left to tell.
    }
  }

  /** onNotify threw: not live until a heartbeat sent after now is heard (or a short while without one). */
  #unheard(): void {
    this.#heard = false;
    this.#failedSeq = this.#sentSeq;
    this.#update();
    if (this.#beat !== undefined || this.#closed) return;
    clearTimeout(this.#unheardTimer);
    this.#unheardTimer = setTimeout(() => {
      this.#heard = true;
      this.#update();
    }, UNHEARD_MS);
    this.#unheardTimer.unref();
  }

  /** Reports the state: live when LISTEN is in effect and the latest heartbeat was heard. */
  #update(): void {
    const listening = this.#session && this.#heard && !this.#closed;
    if (this.#listening === listening) return;
    this.#listening = listening;
    if (listening) for (const resolve of this.#liveWaiters.splice(0)) resolve();
    try {
      this.#options.onState(listening);
    } catch (err) {
      this.#report(err);
    }
  }

  /** LISTEN took effect: live at once without a heartbeat, else once the first is heard. */
  #up(): void {
    this.#session = true;
    this.#upAt = performance.now();
    this.#heard = this.#beat === undefined;
    if (this.#beat !== undefined) {
      this.#sendBeat();
      this.#beatTimer = setInterval(() => {
        this.#sendBeat();
      }, this.#beat.intervalMs);
      this.#beatTimer.unref();
    }
    this.#update();
  }

  /** The session is gone (or closing): not live, and no heartbeat until LISTEN again. */
  #down(): void {
    this.#session = false;
    clearInterval(this.#beatTimer);
    this.#beatTimer = undefined;
    for (const timer of this.#deadlines.values()) clearTimeout(timer);
    this.#deadlines.clear();
    this.#update();
  }

  #sendBeat(): void {
    const beat = this.#beat;
    if (beat === undefined || !this.#session) return;
    this.#sentSeq += 1;
    const seq = this.#sentSeq;
    const deadline = setTimeout(() => {
      this.#missedBeat(seq);
    }, beat.timeoutMs);
    deadline.unref();
    this.#deadlines.set(seq, deadline);
    beat.send(this.#options.channel, `hb:${this.#instance}:${String(seq)}`).catch(() => {
      this.#missedBeat(seq);
    });
  }

  #missedBeat(seq: number): void {
    const deadline = this.#deadlines.get(seq);
    if (deadline === undefined) return; // heard already, or the session is gone
    clearTimeout(deadline);
    this.#deadlines.delete(seq);
    this.#failedSeq = Math.max(this.#failedSeq, seq);
    this.#heard = false;
    this.#update();
  }

  #heardBeat(seq: number): void {
    // Delivery in commit order: hearing seq proves every earlier notice arrived.
    for (const [s, deadline] of this.#deadlines) {
      if (s <= seq) {
        clearTimeout(deadline);
        this.#deadlines.delete(s);
      }
    }
    if (seq > this.#failedSeq) this.#heard = true;
    this.#update();
  }

  #lost(): void {
    if (this.#session) {
      if (performance.now() - this.#upAt >= STABLE_MS) this.#failures = 0;
      else this.#failures += 1;
    }
    this.#down();
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
        if (!this.#closed) this.#up();
      } catch (err) {
        this.#failures += 1;
        this.#down();
        if (!this.#closed) this.#report(err);
      } finally {
        this.#attempt = undefined;
      }
      if (!this.#session) this.#schedule();
    })();
    return this.#attempt;
  }
}
