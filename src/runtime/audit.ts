import path from 'node:path';
import { JsonlAuditLog } from '../permissions/audit/writer.js';
import type { AuditHeadRef } from '../permissions/audit/head.js';
import { systemClock, type Clock } from '../permissions/session-allowlist.js';
import { auditHeadPath, auditLogPath } from '../project/audit-paths.js';
import type { StateKey } from '../project/state-key.js';
import { openStateKey } from './state.js';

// The audit log as a part of this process: the project's log at `<root>/.capsule/audit.jsonl`, anchored by
// its head in the per-user state folder under that folder's key. The gate records into what it is given;
// this is where what it is given is made. Kept light: `capsule hook claude` loads it on every tool call.

export interface ProjectAuditLogOptions {
  /** The project root (as written into the head for people). */
  projectRoot: string;
  /** capsule's per-user state folder, which holds the log's head. */
  stateDir: string;
  /** The key of `stateDir` (the head's MAC); made from it when not given. */
  key?: StateKey | undefined;
  /** When records are stamped; default the system clock. */
  clock?: Clock | undefined;
}

/** The project's own audit log, its head kept in the per-user state folder. */
export async function openProjectAuditLog(options: ProjectAuditLogOptions): Promise<JsonlAuditLog> {
  const root = path.resolve(options.projectRoot);
  return new JsonlAuditLog(auditLogPath(root), options.clock ?? systemClock(), {
    head: {
      file: await auditHeadPath(options.stateDir, root),
      key: options.key ?? openStateKey(options.stateDir),
    },
    projectRoot: root,
  });
}

/** An audit log at `file`, with its head when it has one (`capsule audit reset` of the log it verified). */
export function openAuditLogAt(file: string, head: AuditHeadRef | undefined): JsonlAuditLog {
  return new JsonlAuditLog(file, systemClock(), { head });
}
