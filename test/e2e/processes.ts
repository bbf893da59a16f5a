/**
 * Stopping the server processes an end-to-end test started: by pid, SIGTERM
 * first (the server drains and exits 0), SIGKILL when one is still running
 * after a grace period, so a hung child never outlives its test.
 */
import type { ServerProcess } from '../harness/process.js';

/** How long a process may drain after SIGTERM before it is killed. */
const GRACE_MS = 15_000;

/**
 * Collects everything a process writes to standard output, JSON log lines
 * and plain text alike.
 *
 * @param p the process, just started.
 * @returns a function giving the output so far.
 */
export function captureStdout(p: ServerProcess): () => string {
  let out = '';
  p.child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  return () => out;
}

/**
 * Stops processes by pid: SIGTERM, then SIGKILL for any still running after
 * the grace period.
 *
 * @param processes the processes; ones that already exited are skipped.
 * @returns the exit codes, in order (null for a process killed by a signal).
 */
export async function stopProcesses(
  processes: readonly ServerProcess[],
): Promise<(number | null)[]> {
  return Promise.all(
    processes.map(async (p) => {
      const pid = p.child.pid;
      if (pid === undefined || p.child.exitCode !== null || p.child.signalCode !== null) {
        return p.exited;
      }
      process.kill(pid, 'SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => {
          resolve('late');
        }, GRACE_MS);
      });
      const first = await Promise.race([p.exited, late]);
      clearTimeout(timer);
      if (first !== 'late') return first;
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // It exited between the grace period's end and the kill: nothing to do.
      }
      return p.exited;
    }),
  );
}
