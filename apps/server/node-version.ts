/**
 * The Node.js versions the server runs on, checked before anything else is
 * loaded. On an older Node.js the server used to start and answer every
 * request 500 (`Promise.withResolvers is not a function`, seen with
 * Node.js 20): a runtime outside the range now stops the process at once
 * with one line naming the version it needs. Imports only Node.js built-ins
 * (none at all), so nothing of the application is evaluated first.
 */

/**
 * The Node.js versions supported: `engines.node` of package.json (a test
 * keeps the two equal), a caret range: the same major version, not older
 * than the minimum.
 */
export const REQUIRED_NODE = '^24.11.0';

const VERSION = /^v?(\d+)\.(\d+)\.(\d+)$/;

/**
 * Why a Node.js version cannot run the server, or nothing when it can.
 *
 * @param version the running version, e.g. `process.versions.node` (`24.22.3`).
 * @returns a one-line message naming the range needed and the version
 *   found, or undefined when the version is in {@link REQUIRED_NODE}.
 * @example runtimeRefusal('20.20.2') // 'This server needs Node.js ^24.11.0 ...'
 */
export function runtimeRefusal(version: string): string | undefined {
  const [, major, minor, patch] = VERSION.exec(version) ?? [];
  const [, needMajor, needMinor, needPatch] = VERSION.exec(REQUIRED_NODE.slice(1)) ?? [];
  const found = [major, minor, patch].map(Number);
  const needed = [needMajor, needMinor, needPatch].map(Number);
  const inRange =
    major !== undefined &&
    found[0] === needed[0] &&
    ((found[1] ?? 0) > (needed[1] ?? 0) ||
      (found[1] === needed[1] && (found[2] ?? 0) >= (needed[2] ?? 0)));
  if (inRange) return undefined;
  return (
    `This server needs Node.js ${REQUIRED_NODE} (${REQUIRED_NODE.slice(1)} or a later ` +
    `${String(needed[0])}.x); this is Node.js ${version}. ` +
    'Start it through make (make run), which brings the pinned Node.js when the one on PATH is outside the range.'
  );
}

/**
 * Stops the process, exit status 1 with the reason on standard error, when
 * the running Node.js is outside {@link REQUIRED_NODE}; returns otherwise.
 * The entry point imports this module first and calls it before it loads
 * anything else.
 */
export function refuseUnsupportedNode(): void {
  const refusal = runtimeRefusal(process.versions.node);
  if (refusal === undefined) return;
  process.stderr.write(`${refusal}\n`);
  process.exit(1);
}
