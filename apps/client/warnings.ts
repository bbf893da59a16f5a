/**
 * Keeps node:sqlite's ExperimentalWarning off the command line's output.
 * Some Node.js 24 releases print "SQLite is an experimental feature and
 * might change at any time" once per process when node:sqlite is loaded;
 * for a person reading the client's output it is noise, and for a program
 * parsing standard error it is a line that is not the client's.
 *
 * The filter drops exactly that warning (type ExperimentalWarning, message
 * starting with "SQLite is an experimental feature") and passes every other
 * warning to Node.js unchanged, so deprecations and other experimental
 * features still show. It works by wrapping `process.emitWarning`, which
 * Node.js's own experimental warnings go through, and must be installed
 * before node:sqlite is loaded: the outbox loads it lazily, on first open,
 * for that reason. A flag (`node --disable-warning=ExperimentalWarning`)
 * would hide every experimental warning and depend on how the client is
 * launched; this needs neither.
 */

const SQLITE_WARNING = 'SQLite is an experimental feature';
let installed = false;

/**
 * Whether a warning is node:sqlite's ExperimentalWarning.
 *
 * @param warning the warning or its message, as passed to `process.emitWarning`.
 * @param type its type (the second argument, or an options object with `type`).
 * @returns true for that one warning only.
 */
export function isSqliteExperimentalWarning(warning: unknown, type: unknown): boolean {
  const name =
    typeof type === 'string'
      ? type
      : typeof type === 'object' && type !== null && 'type' in type
        ? type.type
        : warning instanceof Error
          ? warning.name
          : undefined;
  const text = warning instanceof Error ? warning.message : warning;
  return (
    name === 'ExperimentalWarning' && typeof text === 'string' && text.startsWith(SQLITE_WARNING)
  );
}

/**
 * Installs the filter; installing it again does nothing.
 */
export function silenceSqliteExperimentalWarning(): void {
  if (installed) return;
  installed = true;
  const emit = process.emitWarning.bind(process);
  const filtered = (warning: string | Error, ...rest: unknown[]): void => {
    if (isSqliteExperimentalWarning(warning, rest[0])) return;
    Reflect.apply(emit, process, [warning, ...rest]);
  };
  process.emitWarning = filtered;
}
