/**
 * The copy of a request body kept for a retry of the attempt: a handler may
 * change `req.body`, and a retried attempt must see the body as it came.
 * A parsed JSON body (plain objects, arrays, strings, numbers, booleans,
 * null, each object reached once) is copied by hand, several times cheaper
 * than `structuredClone` for the small bodies keyed writes carry, which pay
 * for this copy on every request though few are ever retried. Anything else
 * goes to `structuredClone`: a Date, a Buffer, an object with another
 * prototype, a very deep value, and an object reached twice (a cycle, or
 * one object under two members, as a parser with aliases makes), whose
 * sharing `structuredClone` keeps and a walk of the tree would multiply.
 * For what it copies by hand the result is what `structuredClone` gives;
 * two differences remain where it hands on: a getter read before the hand
 * copy gave up is read again, and a Proxy of a plain object is copied, where
 * `structuredClone` refuses it.
 */

/** Deeper than this, the hand copy gives up (a cycle ends here too). */
const MAX_DEPTH = 64;

/** Marks a value the hand copy does not take. */
const NOT_PLAIN = Symbol('not plain JSON');

/** Own properties of Object.prototype: a member of that name is defined, not assigned. */
function shadowsPrototype(key: string): boolean {
  return Object.prototype.hasOwnProperty.call(Object.prototype, key);
}

function copy(value: unknown, depth: number, seen: WeakSet<object>): unknown {
  if (typeof value !== 'object' || value === null) {
    // bigint, symbol and function: structuredClone's rules, not ours.
    return typeof value === 'bigint' || typeof value === 'symbol' || typeof value === 'function'
      ? NOT_PLAIN
      : value;
  }
  if (depth > MAX_DEPTH || seen.has(value)) return NOT_PLAIN;
  seen.add(value);
  if (Array.isArray(value)) {
    if (Object.getPrototypeOf(value) !== Array.prototype) return NOT_PLAIN;
    const out: unknown[] = new Array<unknown>(value.length);
    for (let i = 0; i < value.length; i++) {
      // A hole is copied as structuredClone copies it: as a hole.
      if (!(i in value)) return NOT_PLAIN;
      const item = copy(value[i], depth + 1, seen);
      if (item === NOT_PLAIN) return NOT_PLAIN;
      out[i] = item;
    }
    return Object.keys(value).length === value.length ? out : NOT_PLAIN;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return NOT_PLAIN;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    const member = copy((value as Record<string, unknown>)[key], depth + 1, seen);
    if (member === NOT_PLAIN) return NOT_PLAIN;
    // An own `__proto__` member (JSON.parse makes one) stays a member, and
    // one named like another of Object.prototype's (`toString`) is written
    // even where that prototype is frozen against pollution.
    if (shadowsPrototype(key)) {
      Object.defineProperty(out, key, {
        value: member,
        writable: true,
        enumerable: true,
        configurable: true,
      });
    } else out[key] = member;
  }
  return out;
}

/**
 * A deep copy of a request body, as `structuredClone` makes it.
 *
 * @param body the parsed body (`req.body`), any value.
 * @returns a copy that shares nothing with `body`.
 * @throws DOMException (DataCloneError) for what `structuredClone` cannot
 *   copy (a function, a symbol), as `structuredClone` does.
 */
export function cloneBody(body: unknown): unknown {
  const copied = copy(body, 0, new WeakSet());
  return copied === NOT_PLAIN ? structuredClone(body) : copied;
}
