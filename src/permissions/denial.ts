import type { Ceiling } from './ceiling.js';

/**
 * What stopped a call, in the four words a person and an agent act on (plus "nobody"):
 * - `rule`: a deny rule, an allowlist "Deny" entry or capsule's own self-protection;
 * - `mode`: the permission mode (plan mode denies every change);
 * - `ceiling`: the call is not sandboxed, so a project file's allow (entry, rule, mode) cannot apply;
 * - `person`: a person answered no at the prompt (now or earlier in this session);
 * - `nobody`: it needed a person and none could be asked (`--no-prompt`, no terminal, a client without
 *   elicitation).
 */
export type DeniedBy = 'rule' | 'mode' | 'ceiling' | 'person' | 'nobody';

/** A denial as data: every surface (CLI, MCP, telemetry) renders it from this, never by parsing text. */
export interface Denial {
  by: DeniedBy;
  /** The engine's step or answer that decided (`deny-rule`, `mode`, `prompt`, `no-prompt`, …). */
  source: string;
  key: string;
  /** The rule text or allowlist key that decided, when one did. */
  matched?: string | undefined;
  /** How far a grant of this key may reach: `project` only for sandboxed calls. */
  ceiling?: Ceiling | undefined;
  /** What happened, without the surface-specific "how to allow it". */
  what: string;
}

/**
 * The one mapping from the engine's decision sources to DeniedBy. `ceilingSkipped`: a project file
 * would have allowed the call but the ceiling kept it out (the call then needed a person).
 */
export function deniedByOf(source: string, ceilingSkipped = false): DeniedBy {
  switch (source) {
    case 'self-protection':
    case 'deny-rule':
    case 'allowlist-deny':
      return 'rule';
    case 'mode':
      return 'mode';
    case 'ceiling':
    case 'project-allowlist':
      // project-allowlist denials are CEILING_VIOLATION: an entry that grants host code for the project.
      return 'ceiling';
    case 'prompt':
    case 'session-deny':
      return 'person';
    case 'no-prompt':
      return ceilingSkipped ? 'ceiling' : 'nobody';
    default:
      // An unknown source is read as the strictest statement: nothing but a person could change it.
      return 'nobody';
  }
}

/** The words a message uses for each DeniedBy. */
export const DENIED_BY_TEXT: Record<DeniedBy, string> = {
  rule: 'a rule',
  mode: 'the mode',
  ceiling: 'the ceiling',
  person: 'a person',
  nobody: 'nobody (no person could be asked)',
};
