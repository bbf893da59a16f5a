/**
 * A bounded in-process cache with a time to live, least recently used
 * first out; see bounded-cache.ts.
 */
export { BoundedCache, type BoundedCacheOptions } from './bounded-cache.js';
