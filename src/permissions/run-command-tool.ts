import { z } from 'zod';
import { CapsuleError } from '../errors.js';
import { HostProcesses } from '../runners/host-process.js';
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
  /** Paths mounted read-only for the command (capsule's own state: capsule.json, .capsule/ …). */
  readOnlyPaths?: readonly string[] | undefined;
  /** How host processes start (default: a new one, probing this machine on first use). */
  hostProcesses?: HostProcesses | undefined;
}

/** Captured output per stream; past it the command is stopped (passed-through output is not capped). */
const CAPTURE_BYTES = 16 * 1024 * 1024;
const KILL_GRACE_MS = 500;

/** Variables a command gets from capsule's environment: what tools need to run, nothing secret. */
const COMMAND_ENV = new Set(['PATH', 'HOME', 'USER', 'LOGNAME', 'LANG', 'LANGUAGE', 'TERM', 'TZ', 'TMPDIR']);

/**
 * The environment bash gets: an allowlist of the caller's variables (PATH, HOME, locale, terminal),
 * never anything else — capsule's own environment may hold API keys, and a command must not read them.
 * BASH_ENV / ENV / exported functions (BASH_FUNC_git%% would replace `git`) never pass, so
 * `run_command:git` cannot end up running something that is not git.
 */
export function shellEnvironment(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (COMMAND_ENV.has(name) || name.startsWith('LC_')) out[name] = value;
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
 * run_command: a host shell command. Not a sandbox, so its keys reach the session allowlist
 * at most. permission() keys the command with the bash parser; execute() runs only after the gate allowed.
 */
export function createRunCommandTool<Ctx extends ToolContext = ToolContext>(
  options: RunCommandToolOptions,
): Tool<typeof runCommandParameters, RunCommandResult, Ctx> {
  const processes = options.hostProcesses ?? new HostProcesses();
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
      const result = await processes.run({
        file: 'bash',
        args: bashArguments(args.command),
        cwd: options.cwd,
        env: shellEnvironment(options.env ?? process.env),
        output: options.passThrough === true ? 'inherit' : 'capture',
        outputBytes: CAPTURE_BYTES,
        killGraceMs: KILL_GRACE_MS,
        signal: ctx.signal,
        readOnlyPaths: options.readOnlyPaths,
      });
      if (result.startError !== undefined) {
        throw new CapsuleError('RUNNER_FAILED', `Could not start bash: ${result.startError}`);
      }
      return {
        exitCode: result.exitCode,
        signal: result.signal,
        stdout: result.stdout,
        stderr: result.stderr,
        durationMs: Math.round(result.durationMs),
      };
    },
  };
}
