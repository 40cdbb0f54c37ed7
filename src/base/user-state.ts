import { createHash } from 'node:crypto';
import path from 'node:path';

/**
 * capsule's per-user state directory: `$CAPSULE_STATE_DIR`, else `$XDG_STATE_HOME/capsule`, else
 * `~/.local/state/capsule` (confirmed policies, the audit log's head).
 * It lies outside every project, so nothing a capability or tool is granted inside a project can
 * reach it (the audit log's head lives here). The environment is passed in by the composition root.
 */
export function userStateDir(env: Readonly<Record<string, string | undefined>>, home: string): string {
  const own = env.CAPSULE_STATE_DIR;
  if (own !== undefined && path.isAbsolute(own)) return own;
  const xdg = env.XDG_STATE_HOME;
  // The XDG spec says a relative value is invalid and must be ignored.
  const base = xdg !== undefined && path.isAbsolute(xdg) ? xdg : path.join(home, '.local', 'state');
  return path.join(base, 'capsule');
}

/**
 * The folder of the per-user key (`<stateDir>/secret`, mode 0700): what authenticates the confirmed
 * policies, audit heads and scan index beside it. Hidden from every confined process.
 */
export function secretDir(stateDir: string): string {
  return path.join(stateDir, 'secret');
}

/**
 * The file of one per-user state record in `dir` (a confirmed policy, an engine's measured posture): named by
 * the sha256 of what it is for (a project's real root, an engine address), so the name is fixed in length and
 * made of hex only, whatever that is.
 */
export function stateRecordFile(dir: string, identity: string): string {
  const id = createHash('sha256').update(identity).digest('hex').slice(0, 32);
  return path.join(dir, `${id}.json`);
}
