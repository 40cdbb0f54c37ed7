import { createHash } from 'node:crypto';
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { STATE_DIR } from './config-store.js';

/** A project's audit log lives in its state folder; its head in the per-user state. */
export const AUDIT_FILE = 'audit.jsonl';

/** Default audit log of a project: `<root>/.capsule/audit.jsonl`. */
export function auditLogPath(projectRoot: string): string {
  return path.join(projectRoot, STATE_DIR, AUDIT_FILE);
}

/**
 * Where the head of a project's log lives: in the per-user state directory (never under a root a
 * capability or tool can be granted), one file per project, named by a hash of the root's real path.
 */
export async function auditHeadPath(userStateDir: string, projectRoot: string): Promise<string> {
  const real = await realpath(projectRoot).catch(() => path.resolve(projectRoot));
  const id = createHash('sha256').update(real).digest('hex').slice(0, 32);
  return path.join(userStateDir, 'audit-heads', `${id}.json`);
}
