/**
 * Connects the identity module's credential feed to PostgreSQL: a
 * {@link PgListener} on the channel the identity triggers notify, whose
 * notices and state go to the token cache. Its heartbeat (every second, over
 * a second connection of its own, heard within two seconds) turns the feed
 * off when the session stays up but stops hearing.
 */
import { PgListener } from '../../../../platform/pg/listener.js';
import type { CredentialFeed } from '../../app/token-cache.js';

/** Options of {@link startCredentialListener}. */
export interface CredentialListenerOptions {
  /** The listener session's name in pg_stat_activity. */
  readonly applicationName: string;
  /** Told when the session is lost (the cache serves nothing until it is back). */
  readonly onLost?: () => void;
  /** Told of an attempt to listen that failed (it is tried again). */
  readonly onError?: (err: unknown) => void;
  /** Heartbeat interval and timeout, in milliseconds; 1000 and 2000 by default. */
  readonly heartbeat?: { readonly intervalMs?: number; readonly timeoutMs?: number };
}

/**
 * Starts listening for credential changes and feeds them to the module.
 *
 * @param url the application role's connection URL.
 * @param feed the module's {@link CredentialFeed}.
 * @param options the session's name and what to tell of losses and errors.
 * @returns the listener, after its first attempt (listening or not); close it on shutdown.
 */
export async function startCredentialListener(
  url: string,
  feed: CredentialFeed,
  options: CredentialListenerOptions,
): Promise<PgListener> {
  const listener = new PgListener(url, {
    channel: feed.channel,
    applicationName: options.applicationName,
    onNotify: (payload) => {
      feed.notify(payload);
    },
    onState: (live) => {
      feed.setLive(live);
      if (!live) options.onLost?.();
    },
    ...(options.onError === undefined ? {} : { onError: options.onError }),
    heartbeat: options.heartbeat ?? {},
  });
  await listener.start();
  return listener;
}
