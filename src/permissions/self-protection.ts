import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { STATE_DIR } from '../config/config-store.js';
import { PROJECT_CONFIG_FILE } from '../config/project-config.js';
import { CapsuleError } from '../errors.js';
import { auditLogPath } from './audit-log.js';

/** Agent profiles of a project (loaded by the profile catalog). */
export const PROFILES_DIR = path.join(STATE_DIR, 'profiles');

export interface ProtectedPaths {
  /** capsule.json: project allowlist, rules, mode. */
  configFile: string;
  /** `.capsule/`: audit log, locks, profiles; protected as a whole. */
  stateDir: string;
  auditLog: string;
  profilesDir: string;
  /** Every path above, for callers that only need the list. */
  all: string[];
}

/** What no tool or capability may write: grants come from the human side only. */
export function protectedPaths(projectRoot: string): ProtectedPaths {
  const root = path.resolve(projectRoot);
  const configFile = path.join(root, PROJECT_CONFIG_FILE);
  const stateDir = path.join(root, STATE_DIR);
  const auditLog = auditLogPath(root);
  const profilesDir = path.join(root, PROFILES_DIR);
  return { configFile, stateDir, auditLog, profilesDir, all: [configFile, stateDir, auditLog, profilesDir] };
}

function covers(protectedPath: string, target: string): boolean {
  // Case-insensitive: on a case-insensitive file system CAPSULE.JSON is capsule.json.
  const p = protectedPath.toLowerCase();
  const t = target.toLowerCase();
  return t === p || t.startsWith(p + path.sep);
}

/** Pure, lexical: the protected path a write to `target` (relative to the root or absolute) would hit. */
export function protectedTarget(projectRoot: string, target: string): string | undefined {
  const abs = path.resolve(projectRoot, target);
  return protectedPaths(projectRoot).all.find((p) => covers(p, abs));
}

/**
 * For tools, right before they write: resolves symlinks of the deepest existing ancestor so that a
 * link pointing at capsule.json or .capsule/ is caught too. Throws PERMISSION_DENIED.
 */
export async function assertNotProtected(projectRoot: string, target: string): Promise<void> {
  const rootReal = await realpath(projectRoot).catch(() => path.resolve(projectRoot));
  const abs = path.resolve(projectRoot, target);
  const candidates = [abs, await resolveExisting(abs)];
  for (const candidate of candidates) {
    const rel = path.relative(rootReal, candidate);
    const hit =
      protectedTarget(rootReal, rel.startsWith('..') ? candidate : rel) ??
      protectedTarget(projectRoot, candidate);
    if (hit !== undefined) {
      throw new CapsuleError(
        'PERMISSION_DENIED',
        `Writing ${target} is refused: ${hit} belongs to capsule itself.`,
        {
          file: target,
          hint: 'capsule.json, the audit log and profiles are changed by a human only (by hand or with the capsule CLI).',
        },
      );
    }
  }
}

async function resolveExisting(abs: string): Promise<string> {
  let dir = abs;
  const rest: string[] = [];
  for (;;) {
    try {
      return path.join(await realpath(dir), ...rest);
    } catch {
      const parent = path.dirname(dir);
      if (parent === dir) return abs;
      rest.unshift(path.basename(dir));
      dir = parent;
    }
  }
}
