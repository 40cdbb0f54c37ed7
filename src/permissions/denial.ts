import type { DeniedBy } from '../base/errors.js';

export type { Denial, DeniedBy } from '../base/errors.js';

/**
 * The one mapping from the engine's decision sources to DeniedBy. `ceilingSkipped`: a project file
 * would have allowed the call but the ceiling kept it out (the call then needed a person).
 */
export function deniedByOf(source: string, ceilingSkipped = false): DeniedBy {
  switch (source) {
    case 'self-protection':
    case 'deny-rule':
    case 'allowlist-deny':
    case 'unproven':
      // `unproven`: a deny rule the call could not be proven clear of, and no person to ask.
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
