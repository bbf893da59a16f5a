/**
 * The origin a sender may send to: an http or https origin without path,
 * query, fragment, user name or password, on a port the Fetch standard
 * does not forbid. The transport refuses any other; the command line's
 * parser (cli-args.ts) checks the same under its flag's name.
 */

/**
 * Reads and checks a base URL.
 *
 * @param baseUrl the server's origin, e.g. `http://127.0.0.1:3000`.
 * @returns the parsed origin.
 * @throws RangeError naming what is wrong with it.
 */
export function parseOrigin(baseUrl: string): URL {
  let origin: URL | undefined;
  try {
    origin = new URL(baseUrl);
  } catch {
    origin = undefined;
  }
  if (
    origin === undefined ||
    (origin.protocol !== 'http:' && origin.protocol !== 'https:') ||
    origin.pathname !== '/' ||
    origin.search !== '' ||
    origin.hash !== ''
  ) {
    throw new RangeError(
      `baseUrl must be an http or https origin without path, query or fragment, got "${baseUrl}"`,
    );
  }
  // fetch refuses them too; the token is the credential, and a password
  // in a URL ends up in logs and process lists.
  if (origin.username !== '' || origin.password !== '') {
    throw new RangeError(
      'baseUrl must not carry a user name or password; the token is the credential',
    );
  }
  const refused = badPort(origin);
  if (refused !== undefined) {
    throw new RangeError(
      `baseUrl's port ${String(refused)} is one fetch refuses to connect to (a bad port of the Fetch standard); use another port`,
    );
  }
  return origin;
}

/**
 * The Fetch standard's "bad ports", which Node.js's fetch refuses to
 * connect to: the ports of other protocols (SMTP, SSH, X11, ...), never
 * this API. node:http would connect to them; the client refuses them
 * before anything is stated or sent, as a caller sending with fetch meets
 * them, instead of waiting for a server that is not there. A test checks
 * the list against fetch.
 */
export const BAD_PORTS: ReadonlySet<number> = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102,
  103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
  512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993,
  995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668,
  6669, 6679, 6697, 10080,
]);

/**
 * The port of an http(s) origin when it is one fetch refuses.
 *
 * @param origin the parsed origin.
 * @returns the port, or undefined when fetch connects to it.
 */
export function badPort(origin: URL): number | undefined {
  const port = Number(origin.port === '' ? (origin.protocol === 'https:' ? 443 : 80) : origin.port);
  return BAD_PORTS.has(port) ? port : undefined;
}
