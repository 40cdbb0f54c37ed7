import { execa } from 'execa';
import { z } from 'zod';
import type { PermissionCheck, Tool, ToolContext } from '../tools/tool.js';
import { commandPermissionKey, type CommandParser } from './command-parser.js';
import { RUN_COMMAND } from './keys.js';
import type { PermissionRequest } from './types.js';

export const runCommandParameters = z.strictObject({
  command: z
    .string()
    .min(1)
    .max(256 * 1024)
    .describe('A bash command line, run with bash -c in the project root.'),
});

export interface RunCommandResult {
  exitCode: number | null;
  signal: string | null;
  /** Captured output; empty when the output was passed through to the terminal. */
  stdout: string;
  stderr: string;
  durationMs: number;
}

export interface RunCommandToolOptions {
  parser: CommandParser;
  cwd: string;
  /** Pass stdout/stderr through (the CLI) instead of capturing them (MCP, library). */
  passThrough?: boolean | undefined;
  env?: NodeJS.ProcessEnv | undefined;
}

/**
 * The environment bash gets: the caller's, minus what would make bash run other code than the command
 * that was keyed — BASH_ENV / ENV (sourced at start) and exported functions (BASH_FUNC_git%% would
 * replace `git`). Otherwise `run_command:git` could end up running something that is not git.
 */
export function shellEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (name === 'BASH_ENV' || name === 'ENV' || name.startsWith('BASH_FUNC_') || name === 'SHELLOPTS')
      continue;
    if (value !== undefined) out[name] = value;
  }
  return out;
}

/** bash without startup files: what runs is exactly the command that was keyed. */
export function bashArguments(command: string): string[] {
  return ['--noprofile', '--norc', '-c', command];
}

/**
 * The gate's view of a command: its key, the normalized subject, and every simple command inside.
 * `cwd` is the folder it runs in: a relative program (`./build.sh`) is keyed by its resolved path.
 */
export function commandCheck(
  parser: CommandParser,
  command: string,
  cwd?: string,
): PermissionCheck & { parts: string[] } {
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
  const check = commandCheck(parser, command, cwd);
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

/**
 * run_command (seed 000): a host shell command. Not a sandbox, so its keys reach the session allowlist
 * at most. permission() keys the command with the bash parser; execute() runs only after the gate allowed.
 */
export function createRunCommandTool<Ctx extends ToolContext = ToolContext>(
  options: RunCommandToolOptions,
): Tool<typeof runCommandParameters, RunCommandResult, Ctx> {
  return {
    name: RUN_COMMAND,
    description:
      'Run a bash command on the host (not sandboxed). Needs approval per program or per compound command.',
    kind: 'OTHER',
    parameters: runCommandParameters,
    permission(args) {
      return Promise.resolve(commandCheck(options.parser, args.command, options.cwd));
    },
    async execute(args, ctx) {
      const started = performance.now();
      const result = await execa('bash', bashArguments(args.command), {
        cwd: options.cwd,
        env: shellEnvironment(options.env ?? process.env),
        extendEnv: false,
        reject: false,
        stdin: 'ignore',
        stdout: options.passThrough === true ? 'inherit' : 'pipe',
        stderr: options.passThrough === true ? 'inherit' : 'pipe',
        cancelSignal: ctx.signal,
        stripFinalNewline: false,
      });
      return {
        exitCode: result.exitCode ?? null,
        signal: result.signal ?? null,
        stdout: typeof result.stdout === 'string' ? result.stdout : '',
        stderr: typeof result.stderr === 'string' ? result.stderr : '',
        durationMs: Math.round(performance.now() - started),
      };
    },
  };
}
