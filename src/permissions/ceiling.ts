import { RUN_COMMAND } from './keys.js';
import type { PermissionRequest } from './types.js';

export type Ceiling = 'session' | 'project';

export interface CeilingVerdict {
  ceiling: Ceiling;
  reason: string;
}

/**
 * Who stands behind a rule, a mode or an allowlist entry:
 * - `process`: this process — its flags (`--grant`, `--mode`), the program embedding capsule, and the
 *   built-in profiles shipped with capsule;
 * - `persistent`: a file in the project (capsule.json `mode`, `permissions`, `allowlist`; profiles under
 *   `.capsule/profiles/`), which a repository can bring along in a pull request.
 */
export type Trust = 'process' | 'persistent';

/** Where a rule set or a mode came from, for the trust decision and for explain/warnings. */
export interface PolicySource {
  trust: Trust;
  /** `capsule.json`, `profile:<name> (<file>)`, `--mode` … */
  origin: string;
}

/**
 * The environment-aware ceiling rule (docs/permissions.md, "The ceiling rule"): whatever runs outside a real sandbox
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

/**
 * The ceiling governs every persistent source, not only the allowlist: an allow from a project file
 * (rule, mode, entry) applies only where a project grant could, i.e. to sandboxed calls. For the rest a
 * file can deny or leave the call to be asked; allowing it takes this process or a person.
 */
export function mayAllow(source: PolicySource, ceiling: CeilingVerdict): boolean {
  return source.trust === 'process' || ceiling.ceiling === 'project';
}
