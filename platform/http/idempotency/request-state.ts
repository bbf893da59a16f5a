/**
 * What the plugin keeps on a request between its hooks, under Symbols of
 * its own (as @fastify/rate-limit keeps its state): no application
 * property can clash with them, and no code outside the plugin reads or
 * overwrites them by name. Both are decorated on every request with null
 * (plugin.ts), so requests keep one shape.
 */
import type { FastifyRequest } from 'fastify';
import type { Id } from '../../../kernel/ids/index.js';
import type { KeyedRoute } from './checks.js';

/** The keyed state of one request, set by the preValidation hook. */
export interface KeyedState {
  readonly principalId: Id;
  readonly key: Id;
  readonly sha256: Buffer;
  readonly route: KeyedRoute;
}

/** The request's keyed state: set on keyed requests by preValidation, null otherwise. */
export const KEYED_STATE = Symbol('idempotency keyed state');
/** The body bytes as received, kept by preParsing when a key is sent; null otherwise. */
export const BODY_BYTES = Symbol('idempotency body bytes');

interface PluginRequest {
  [KEYED_STATE]: KeyedState | null;
  [BODY_BYTES]: Buffer[] | null;
}

const own = (req: FastifyRequest): PluginRequest => req as unknown as PluginRequest;

/**
 * The request's keyed state.
 *
 * @param req the request.
 * @returns the state, or null when the request is not keyed (yet).
 */
export function keyedStateOf(req: FastifyRequest): KeyedState | null {
  return own(req)[KEYED_STATE];
}

/**
 * Sets the request's keyed state.
 *
 * @param req the request.
 * @param state its key, owner, fingerprint and route.
 */
export function setKeyedState(req: FastifyRequest, state: KeyedState): void {
  own(req)[KEYED_STATE] = state;
}

/**
 * The body bytes kept for the fingerprint.
 *
 * @param req the request.
 * @returns the chunks as received, or null when none were kept.
 */
export function bodyBytesOf(req: FastifyRequest): Buffer[] | null {
  return own(req)[BODY_BYTES];
}

/**
 * Keeps the list the body's chunks are collected into.
 *
 * @param req the request.
 * @param chunks the list `keepBytes` fills as the body is read.
 */
export function setBodyBytes(req: FastifyRequest, chunks: Buffer[]): void {
  own(req)[BODY_BYTES] = chunks;
}
