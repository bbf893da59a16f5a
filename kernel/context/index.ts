/**
 * The request context: correlation id, actor and flags of the current request,
 * carried through async calls by AsyncLocalStorage.
 *
 * @packageDocumentation
 */
export type { RequestContext } from './context.js';
export {
  currentContext,
  enterContext,
  newRequestContext,
  requireContext,
  runWithContext,
  setActor,
} from './context.js';
