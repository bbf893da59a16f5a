/**
 * CPU time of processes from /proc, for the benchmark's "CPU microseconds
 * per request" columns: the server's Node.js process on one side, the
 * PostgreSQL postmaster and every backend it forked on the other.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** Clock ticks per second of /proc's utime and stime (`getconf CLK_TCK`). */
const TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** One line of /proc/<pid>/stat, the fields the benchmark reads. */
export interface ProcStat {
  readonly pid: number;
  readonly ppid: number;
  /** User plus system CPU time, in microseconds. */
  readonly cpuMicros: number;
}

/**
 * Parses the text of /proc/<pid>/stat. The command name (field 2) is in
 * parentheses and may itself hold spaces and parentheses, so the fields are
 * counted from the last closing parenthesis.
 *
 * @param text the file's content.
 * @param ticksPerSecond clock ticks per second (CLK_TCK).
 * @returns pid, parent pid and CPU time.
 * @throws Error when the text is not a stat line.
 */
export function parseProcStat(text: string, ticksPerSecond = TICKS_PER_SECOND): ProcStat {
  const close = text.lastIndexOf(')');
  const open = text.indexOf('(');
  if (open < 1 || close < open) throw new Error(`not a /proc stat line: ${text.slice(0, 80)}`);
  const pid = Number(text.slice(0, open).trim());
  // After ")": state(3) ppid(4) ... utime(14) stime(15).
  const rest = text.slice(close + 2).split(' ');
  const ppid = Number(rest[1]);
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  if (![pid, ppid, utime, stime].every(Number.isFinite)) {
    throw new Error(`not a /proc stat line: ${text.slice(0, 80)}`);
  }
  return { pid, ppid, cpuMicros: ((utime + stime) * 1_000_000) / ticksPerSecond };
}

function statOf(pid: number): ProcStat | undefined {
  try {
    return parseProcStat(fs.readFileSync(`/proc/${String(pid)}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * CPU microseconds used so far by one process.
 *
 * @param pid the process.
 * @returns its user plus system time, or 0 when it is gone.
 */
export function processCpuMicros(pid: number): number {
  return statOf(pid)?.cpuMicros ?? 0;
}

/**
 * CPU microseconds used so far by a process and its direct children (the
 * postmaster and its backends). A backend that exited meanwhile takes its
 * time with it, so callers sample around a window in which the pool's
 * connections stay open.
 *
 * @param pid the parent.
 * @returns the sum of their user plus system times.
 */
export function treeCpuMicros(pid: number): number {
  let total = processCpuMicros(pid);
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = statOf(Number(entry));
    if (stat?.ppid === pid) total += stat.cpuMicros;
  }
  return total;
}

/**
 * The postmaster's pid of a data directory (first line of postmaster.pid).
 *
 * @param dataDir the cluster's data directory.
 * @returns the pid.
 * @throws Error when the server is not running.
 */
export function postmasterPid(dataDir: string): number {
  const text = fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8');
  const pid = Number(text.split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no postmaster pid in ${dataDir}`);
  return pid;
}

/** The system call counts of /proc/<pid>/io the benchmark reads. */
export interface ProcIo {
  /** Read system calls so far. */
  readonly syscr: number;
  /** Write system calls so far. */
  readonly syscw: number;
}

/**
 * Parses the text of /proc/<pid>/io.
 *
 * @param text the file's content (`name: value` lines).
 * @returns the read and write system call counts.
 * @throws Error when the text has no such counts.
 */
export function parseProcIo(text: string): ProcIo {
  const value = (name: string) => Number(new RegExp(`^${name}: (\\d+)$`, 'm').exec(text)?.[1]);
  const syscr = value('syscr');
  const syscw = value('syscw');
  if (!Number.isFinite(syscr) || !Number.isFinite(syscw)) {
    throw new Error(`not a /proc io file: ${text.slice(0, 80)}`);
  }
  return { syscr, syscw };
}

/**
 * Write system calls made so far by one process: a socket write is one
 * send of a round trip to PostgreSQL (or one HTTP answer).
 *
 * @param pid the process.
 * @returns its write system calls, or 0 when it is gone.
 */
export function processWrites(pid: number): number {
  try {
    return parseProcIo(fs.readFileSync(`/proc/${String(pid)}/io`, 'utf8')).syscw;
  } catch {
    return 0;
  }
}
