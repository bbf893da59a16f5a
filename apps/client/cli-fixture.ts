/**
 * What the command line's tests share (cli.test.ts, cli-args.test.ts,
 * cli-entry.test.ts, cli-answers.test.ts, cli-reported.test.ts): two
 * account ids, a temporary directory removed after the test, a capture of
 * what a command writes, and a port nothing listens on. It is no part of
 * the library (index.ts does not export it); it lives beside the tests
 * because they need nothing beyond apps/client for it, and it imports only
 * the test runner's types, which compiling erases, so dist/ never loads
 * the test runner.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Test } from 'tap';

/** The repository's root, where a child process of the entry point runs. */
export const root = path.resolve(import.meta.dirname, '../..');

/**
 * A fresh temporary directory, removed with its contents when the test ends.
 *
 * @param t the test whose teardown removes it
 * @returns its path
 */
export async function tempDir(t: Test): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'client-cli-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

/** An account id (a UUIDv7) for a transfer's `--from`. */
export const ID_A = '0190f2a4-1b2c-7d3e-8f40-123456789abc';
/** Another account id (a UUIDv7) for a transfer's `--to`. */
export const ID_B = '0190f2a4-1b2c-7d3e-8f40-123456789abd';

/** The streams a command writes to, and what it wrote to each so far. */
export interface Captured {
  readonly stdout: { write: (s: string, done?: (err?: Error | null) => void) => boolean };
  readonly stderr: { write: (s: string) => boolean };
  /** Everything written to standard output. */
  readonly out: () => string;
  /** Everything written to standard error. */
  readonly err: () => string;
}

/**
 * Captures what a command writes.
 *
 * @returns streams for `runCli`, each write accepted at once
 */
export function io(): Captured {
  let out = '';
  let err = '';
  return {
    stdout: {
      write: (s: string, done?: (err?: Error | null) => void) => {
        out += s;
        done?.();
        return true;
      },
    },
    stderr: { write: (s: string) => ((err += s), true) },
    out: () => out,
    err: () => err,
  };
}

/**
 * A port nothing listens on.
 *
 * @returns a port of 127.0.0.1 that was free a moment ago
 */
export async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}
