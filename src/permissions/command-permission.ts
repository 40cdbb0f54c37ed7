import { commandPermissionKey, type CommandParser } from './command-parser.js';
import { RUN_COMMAND } from './keys.js';
import type { DeclaredPermission, PermissionRequest } from './types.js';

/**
 * The gate's view of a command: its key, the normalized subject, and every simple command inside.
 * `cwd` is the folder it runs in: a relative program (`./build.sh`) is keyed by its resolved path.
 * Pure keying only; running the command is the run_command tool's (src/tools/run-command.ts).
 */
export function commandPermission(
  parser: CommandParser,
  command: string,
  cwd?: string,
): DeclaredPermission & { parts: string[] } {
  // The key only: the gate computes what the command runs itself (deny rules).
  const analysis = parser.analyze(command, { facts: false });
  return {
    permission: { type: 'ask', key: commandPermissionKey(analysis, cwd) },
    subject: analysis.normalized,
    sandboxed: false,
    isolation: 'run_command runs on the host, outside any sandbox',
    parts: analysis.parts,
  };
}

/** The full PermissionRequest of a command (for `capsule explain`, benchmarks and tests). */
export function commandRequest(parser: CommandParser, command: string, cwd?: string): PermissionRequest {
  const check = commandPermission(parser, command, cwd);
  if (check.permission.type !== 'ask') throw new Error('unreachable: commands always ask');
  return {
    tool: RUN_COMMAND,
    kind: 'OTHER',
    key: check.permission.key,
    subject: check.subject,
    sandboxed: false,
    isolation: check.isolation,
    parts: check.parts,
  };
}
