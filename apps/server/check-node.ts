/**
 * Imported first by the entry point, for its effect: ES modules are
 * evaluated in the order they are imported, so this runs before any module
 * of the application does, and an unsupported Node.js stops the process
 * here with one line (node-version.ts) instead of failing later on an API
 * it lacks.
 */
import { refuseUnsupportedNode } from './node-version.js';

refuseUnsupportedNode();
