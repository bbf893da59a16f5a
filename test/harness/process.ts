/**
 * Runs the server as a real child process (from source through tsx, or from
 * the build), collects its JSON log lines and lets a test wait for one.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import path from 'node:path';
import { projectRoot } from '../../platform/migrate/index.js';

/** A running server process. */
export interface ServerProcess {
  readonly child: ChildProcessWithoutNullStreams;
  /** Parsed JSON log lines so far. */
  readonly lines: Record<string, unknown>[];
  /** Standard error so far. */
  stderr(): string;
  /** Resolves with the first log line matching, or rejects when the process exits first. */
  waitForLine(match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
}

/**
 * Starts `apps/server/main.ts` with the given arguments and environment
 * (added to a minimal one; the parent's environment is not inherited, so no
 * stray setting changes the test).
 *
 * @param args command line arguments.
 * @param env configuration through environment variables.
 * @returns the process handle.
 */
export function startServerProcess(args: string[], env: Record<string, string>): ServerProcess {
  return startScriptProcess('apps/server/main.ts', args, env);
}

/**
 * Starts another server entry point of this repository (e.g. the
 * benchmark's peer server) the way {@link startServerProcess} starts the
 * real one.
 *
 * @param script path from the repository root.
 * @param args command line arguments.
 * @param env configuration through environment variables.
 * @returns the process handle.
 */
export function startScriptProcess(
  script: string,
  args: string[],
  env: Record<string, string>,
): ServerProcess {
  const root = projectRoot();
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, script), ...args], {
    cwd: root,
    env: {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: process.env['HOME'] ?? '/tmp',
      // tap instruments child processes too; a child transpiled by tsx
      // (esbuild) maps its coverage onto the same files differently from
      // the test processes (ts-node), and merging the two corrupts the
      // report. The server's own tests measure its coverage.
      _TAPJS_PROCESSINFO_COVERAGE_: '0',
      // Worker processes of parallel tests must not fight over the default
      // metrics port; a test that cares sets its own.
      METRICS__PORT: '0',
      ...env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  const waiters: {
    match: (l: Record<string, unknown>) => boolean;
    resolve: (l: Record<string, unknown>) => void;
  }[] = [];
  let err = '';
  let buffer = '';
  child.stdout.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const text = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      if (!text.startsWith('{')) continue;
      const line = JSON.parse(text) as Record<string, unknown>;
      lines.push(line);
      for (const w of [...waiters]) {
        if (w.match(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  });
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => {
      resolve(code);
    });
  });
  return {
    child,
    lines,
    stderr: () => err,
    exited,
    waitForLine: (match) => {
      const found = lines.find(match);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        waiters.push({ match, resolve });
        void exited.then((code) => {
          reject(new Error(`server exited (${String(code)}) before the line; stderr: ${err}`));
        });
      });
    },
  };
}
