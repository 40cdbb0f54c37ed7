import { PROJECT_CONFIG_FILE } from '../project/project-config.js';
import { canonicalNetwork, type AuditEvent } from './audit/record.js';
import { deniedByOf } from './denial.js';
import type { PolicyChange } from './policy-diff.js';
import type { EgressRecord, PermissionRequest } from './types.js';

// What the permission engine writes into the audit log, one shape per kind of record: a decision on a
// request, a network request of a running capability, and what reload() found. The engine appends them to
// the sink its caller gave it.

/** A decision's own fields; `ceilingSkipped`: a project-file allow was passed over (see denial.ts). */
export type DecisionFields = Pick<AuditEvent, 'decision' | 'source' | 'reason'> &
  Partial<Pick<AuditEvent, 'matched' | 'answer'>> & { ceilingSkipped?: boolean };

/** A decision on `request`, taken in `mode`. */
export function decisionRecord(request: PermissionRequest, mode: string, event: DecisionFields): AuditEvent {
  const { ceilingSkipped, ...fields } = event;
  return {
    tool: request.tool,
    key: request.key.raw,
    mode,
    contentHash: request.contentHash,
    sandboxed: request.sandboxed,
    learning: request.learning === true ? true : undefined,
    // The same mapping the denial a caller sees is built with (denialOf), so log and answer agree.
    deniedBy: event.decision === 'deny' ? deniedByOf(event.source, ceilingSkipped === true) : undefined,
    ...fields,
  };
}

/** One network request of a running capability (tool `network`). */
export function networkRecord(record: EgressRecord, mode: string): AuditEvent {
  return {
    tool: 'network',
    key: `network:${record.host}:${record.port}`,
    mode,
    decision: record.decision,
    source: record.decision === 'allow' ? 'network-grant' : 'egress-policy',
    reason: `${record.capability}: ${record.method} ${record.host}:${record.port} ${record.decision === 'allow' ? 'allowed' : 'refused'}: ${record.reason}`,
    contentHash: record.contentHash,
    network: canonicalNetwork(record),
  };
}

/** A changed policy reload() showed: confirmed by a person, or not (`asked`: someone could confirm). */
export function policyChangeRecord(
  change: PolicyChange,
  confirmed: boolean,
  mode: string,
  asked: boolean,
): AuditEvent {
  return {
    tool: 'reload',
    key: `reload:${PROJECT_CONFIG_FILE}`,
    mode,
    decision: confirmed ? 'allow' : 'deny',
    source: confirmed || asked ? 'prompt' : 'no-prompt',
    reason: `policy change ${confirmed ? 'confirmed' : 'not confirmed'}: ${change.lines.join('; ')}`,
  };
}

/** A change of capsule's protected files seen after a host run (reported, never adopted). */
export function protectedChangeRecord(reason: string, mode: string): AuditEvent {
  return {
    tool: 'reload',
    key: `reload:${PROJECT_CONFIG_FILE}`,
    mode,
    decision: 'deny',
    source: 'protected-files',
    reason,
  };
}
