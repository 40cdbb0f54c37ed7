/**
 * A command's permission: its key (`run_command:PROGRAM` or the whole normalized command), its
 * declaration and request, and the canonical form of a `--grant` key.
 */
import path from 'node:path';
import { CapsuleError } from '../../base/errors.js';
import { makeKey, parseGrant, RUN_COMMAND } from '../keys.js';
import type { DeclaredPermission, PermissionKey, PermissionRequest } from '../types.js';
import type { CommandAnalysis, CommandParser } from './parser.js';

export interface CommandKey {
  tool: 'run_command';
  key: string;
  compound: boolean;
}

/**
 * The permission key of a command line: `run_command:<program>` or the whole normalized command.
 * A relative program path (`./build.sh`) names a different file in every folder, so with the folder the
 * command runs in (`cwd`) its key is the resolved absolute path.
 */
export function commandPermissionKey(analysis: CommandAnalysis, cwd?: string): PermissionKey {
  if (analysis.compound || analysis.program === undefined)
    return makeKey(RUN_COMMAND, analysis.normalized, true);
  return makeKey(RUN_COMMAND, resolveProgram(analysis.program, cwd), false);
}

/** A program path relative to `cwd`, made absolute; a bare name (PATH lookup) or absolute path as is. */
export function resolveProgram(program: string, cwd: string | undefined): string {
  if (cwd === undefined || !program.includes('/') || program.startsWith('/')) return program;
  return path.resolve(cwd, program);
}

/** `capsule key`'s contract: `{"tool":"run_command","key":"…","compound":true|false}`. */
export function keyCommand(parser: CommandParser, command: string, cwd?: string): CommandKey {
  const key = commandPermissionKey(parser.analyze(command, { facts: false }), cwd);
  return { tool: 'run_command', key: key.raw, compound: key.compound };
}

/**
 * A `--grant` key in canonical form. run_command grants are checked against the parser: a compound
 * command is normalized (so extra spaces still match); `run_command:git status` is refused because keys of
 * simple commands name the program only — granting it as `run_command:git` must be a visible choice.
 */
export function canonicalGrantKey(parser: CommandParser, raw: string, cwd?: string): string {
  const key = parseGrant(raw);
  if (key.tool !== RUN_COMMAND || key.action === '*' || key.action.endsWith(':*')) return key.raw;
  const programWord = key.action.trimStart().split(/\s/, 1)[0] ?? '';
  if (programWord !== '[' && programWord !== '[[' && /^[^'"\\]*[*?[]/.test(programWord)) {
    // `run_command:ech*` would be the key of the literal command `ech*` only: it never covers `echo`.
    throw new CapsuleError(
      'USAGE',
      `"${raw}" is not a key: a grant names one program or one exact command, never a pattern.`,
      {
        key: raw,
        hint: 'Grant the program (--grant run_command:echo) or write a rule (run_command(echo *)) in capsule.json.',
      },
    );
  }
  const analysis = parser.analyze(key.action);
  if (analysis.compound) return commandPermissionKey(analysis).raw;
  if (analysis.program !== key.action) {
    throw new CapsuleError(
      'USAGE',
      `"${raw}" is not a key: a simple command is keyed by its program, e.g. run_command:${analysis.program ?? 'git'}.`,
      {
        key: raw,
        hint: `Use --grant run_command:${analysis.program ?? 'PROGRAM'} (covers every ${analysis.program} command).`,
      },
    );
  }
  return commandPermissionKey(analysis, cwd).raw;
}

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
