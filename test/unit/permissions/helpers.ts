import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { makeKey } from '../../../src/permissions/keys.js';
import type { PermissionRequest, ToolKind } from '../../../src/permissions/types.js';

export const HASH_A = `sha256:${'a'.repeat(64)}`;
export const HASH_B = `sha256:${'b'.repeat(64)}`;

export async function tempProject(config?: unknown): Promise<{ root: string; file: string }> {
  const root = await mkdtemp(path.join(tmpdir(), 'capsule-perm-'));
  const file = path.join(root, 'capsule.json');
  if (config !== undefined)
    await writeFile(file, typeof config === 'string' ? config : JSON.stringify(config, null, 2));
  return { root, file };
}

export function capabilityRequest(
  name: string,
  options: { sandboxed: boolean; hash?: string; isolation?: string },
): PermissionRequest {
  return {
    tool: 'run_capability',
    kind: 'OTHER',
    key: makeKey('run_capability', name),
    subject: name,
    sandboxed: options.sandboxed,
    isolation: options.isolation ?? (options.sandboxed ? 'wasm sandbox' : 'shell: a host process'),
    contentHash: options.hash ?? HASH_A,
  };
}

export function commandReq(program: string, subject = program, compound = false): PermissionRequest {
  return {
    tool: 'run_command',
    kind: 'OTHER',
    key: makeKey('run_command', compound ? subject : program, compound),
    subject,
    sandboxed: false,
  };
}

export function toolReq(tool: string, kind: ToolKind, action: string): PermissionRequest {
  return { tool, kind, key: makeKey(tool, action), subject: action, sandboxed: false };
}

export function fakeClock(start = 1_000_000): { now(): number; advance(ms: number): void } {
  let t = start;
  return {
    now: () => t,
    advance(ms: number) {
      t += ms;
    },
  };
}
