import { RUN_COMMAND } from './keys.js';
import type { PermissionRequest } from './types.js';

export type Ceiling = 'session' | 'project';

export interface CeilingVerdict {
  ceiling: Ceiling;
  reason: string;
}

/**
 * The environment-aware ceiling rule (seed 000 §4.3, MISSION §3): whatever runs outside a real sandbox
 * (every run_command key, shell capabilities, docker that is not hardened) reaches the session allowlist
 * at most. `request.sandboxed` is judged by the caller from the effective configuration at run time.
 */
export function ceilingFor(request: PermissionRequest): CeilingVerdict {
  if (request.tool === RUN_COMMAND || request.key.tool === RUN_COMMAND) {
    return { ceiling: 'session', reason: 'run_command runs on the host, outside any sandbox' };
  }
  if (!request.sandboxed) {
    return { ceiling: 'session', reason: request.isolation ?? 'not sandboxed' };
  }
  return { ceiling: 'project', reason: request.isolation ?? 'sandboxed' };
}
