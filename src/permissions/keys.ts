import { CapsuleError } from '../base/errors.js';
import { matchPathGlob } from '../base/glob.js';
import { TOOL_NAME } from '../project/key-syntax.js';
import { grantNeverMatches } from '../project/never-matches.js';
import type { PermissionKey } from './types.js';

/**
 * Key grammar (docs/permissions.md):
 *   key      := tool ":" action
 *   tool     := [a-z][a-z0-9_]*           e.g. run_command, run_capability, write_file
 *   action   := any non-empty text; everything after the first ':' belongs to the action
 * Wildcards (grants only, never requests): `tool:*` covers every non-compound action of the tool;
 * `tool:prefix:*` covers `tool:prefix` and `tool:prefix:…`. For write_file the action is a path glob.
 */
export { TOOL_NAME };

export const RUN_COMMAND = 'run_command';
export const RUN_CAPABILITY = 'run_capability';
export const WRITE_FILE = 'write_file';
export const GENERATE_CAPABILITY = 'generate_capability';

export function makeKey(tool: string, action: string, compound = false): PermissionKey {
  return { tool, action, raw: `${tool}:${action}`, compound };
}

/** Parse a key string as written by a human (`--grant`, capsule.json). Throws USAGE on bad syntax. */
export function parseKey(raw: string, where?: { file?: string; field?: string }): PermissionKey {
  const i = raw.indexOf(':');
  const tool = i < 0 ? raw : raw.slice(0, i);
  const action = i < 0 ? '' : raw.slice(i + 1);
  if (!TOOL_NAME.test(tool) || action === '') {
    throw new CapsuleError(
      where?.file !== undefined ? 'CONFIG_INVALID' : 'USAGE',
      `"${raw}" is not a permission key: expected TOOL:ACTION, e.g. run_command:git or run_capability:hello.`,
      { key: raw, file: where?.file, field: where?.field, hint: 'See "Key grammar" in docs/permissions.md.' },
    );
  }
  return makeKey(tool, action, false);
}

/**
 * Parse a grant as written (`--grant`, a capsule.json allowlist key) and refuse one that can never
 * match any call: USAGE naming `--grant` for a flag, CONFIG_INVALID naming the file and field otherwise.
 */
export function parseGrant(raw: string, where?: { file?: string; field?: string }): PermissionKey {
  const key = parseKey(raw, where);
  const never = grantNeverMatches(key.tool, key.action);
  if (never !== undefined) {
    const flag = where?.file === undefined;
    throw new CapsuleError(
      flag ? 'USAGE' : 'CONFIG_INVALID',
      `${flag ? `--grant ${raw}` : `"${raw}"`} can never match: ${never.why}.`,
      {
        key: raw,
        file: where?.file,
        field: where?.field ?? (flag ? '--grant' : undefined),
        hint: never.hint,
      },
    );
  }
  return key;
}

/** True when the key (as written in a grant) is a wildcard rather than one exact key. */
export function isWildcardGrant(grant: string): boolean {
  return grant.endsWith(':*') || (grant.startsWith(`${WRITE_FILE}:`) && /[*?[]/.test(grant));
}

/**
 * Does a granted key cover the requested key? Pure; the heart of "a simple-command or wildcard grant
 * never covers a compound command": a compound request is covered only by the identical string.
 */
export function grantCovers(grant: string, request: PermissionKey): boolean {
  if (grant === request.raw) return true;
  if (request.compound) return false;
  const i = grant.indexOf(':');
  if (i < 0 || grant.slice(0, i) !== request.tool) return false;
  const action = grant.slice(i + 1);
  if (action === '*') return true;
  if (action.endsWith(':*')) {
    const prefix = action.slice(0, -2);
    return request.action === prefix || request.action.startsWith(`${prefix}:`);
  }
  if (request.tool === WRITE_FILE && /[*?[]/.test(action)) return matchPathGlob(action, request.action);
  return false;
}
