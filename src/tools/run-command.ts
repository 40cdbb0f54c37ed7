import path from 'node:path';
import { z } from 'zod';
import { CapsuleError } from '../base/errors.js';
import { commandPermission } from '../permissions/commands/permission.js';
import type { CommandParser } from '../permissions/commands/parser.js';
import type { HostProtection } from '../project/protected-state.js';
import { HostProcesses } from '../runners/host/host-processes.js';
import type { RunResult } from '../runners/types.js';
import type { CapabilityContext } from './ports.js';
import type { Tool } from './tool.js';
import type { ResolvedPath, Workspace } from './workspace.js';
import { singleQuoted } from '../base/shell-quote.js';

export const RUN_COMMAND_DEFAULT_TIMEOUT_MS = 60_000;
export const RUN_COMMAND_MAX_TIMEOUT_MS = 10 * 60_000;
/** Captured output per stream for an agent; past it the command is stopped. */
export const RUN_COMMAND_OUTPUT_BYTES = 1024 * 1024;

/** The runners' result shape, for a command (no memory limit, so no oomKilled). */
export interface CommandResult extends Omit<RunResult, 'environment' | 'oomKilled' | 'pidsLimited'> {
  command: string;
}

/** Variables a command gets from capsule's environment: what tools need to run, nothing secret. */
const COMMAND_ENV = new Set(['PATH', 'HOME', 'USER', 'LOGNAME', 'LANG', 'LANGUAGE', 'TERM', 'TZ', 'TMPDIR']);

/**
 * The environment bash gets: an allowlist of the caller's variables (PATH, HOME, locale, terminal),
 * never anything else — capsule's own environment may hold API keys, and a command must not read them.
 * BASH_ENV / ENV / exported functions (BASH_FUNC_git%% would replace `git`) never pass, so
 * `run_command:git` cannot end up running something that is not git.
 */
function shellEnvironment(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (COMMAND_ENV.has(name) || name.startsWith('LC_')) out[name] = value;
  }
  return out;
}

/** bash without startup files: what runs is exactly the command that was keyed. */
function bashArguments(command: string): string[] {
  return ['--noprofile', '--norc', '-c', command];
}

const runCommandParameters = z.strictObject({
  command: z
    .string()
    .min(1)
    .max(256 * 1024)
    .describe(
      'A bash command line. A simple command is keyed run_command:<program>; anything compound by its whole text.',
    ),
  cwd: z
    .string()
    .min(1)
    .max(4096)
    .optional()
    .describe('Working folder, relative to the project root (default: the project root).'),
  timeoutMs: z
    .int()
    .min(1)
    .max(RUN_COMMAND_MAX_TIMEOUT_MS)
    .default(RUN_COMMAND_DEFAULT_TIMEOUT_MS)
    .describe(
      `Wall-clock limit; the whole process group is killed when it passes (max ${RUN_COMMAND_MAX_TIMEOUT_MS}).`,
    ),
});

/** What run_command needs from the session it runs in (the agent's context has all of it). */
export interface RunCommandContext extends CapabilityContext {
  workspace: Workspace;
  /** The permission engine's bash parser (run_command keying). */
  commands: CommandParser;
}

export interface RunCommandToolOptions {
  /** capsule's own environment; bash gets only shellEnvironment() of it. Required: no silent process.env. */
  env: NodeJS.ProcessEnv;
  /** How host processes start (default: a new one, probing this machine on first use). */
  hostProcesses?: HostProcesses | undefined;
  /** What the command may not change or see (default: the workspace's, see Workspace.hostProtection). */
  protection?: ((workspace: Workspace) => HostProtection) | undefined;
  /** stdout/stderr pass through to capsule's own (`capsule exec`), not captured and not capped. */
  passThrough?: boolean | undefined;
  /**
   * false: no wall-clock limit, `timeoutMs` is not applied (`capsule exec`: a person is there to
   * press Ctrl-C). Default true.
   */
  timeLimit?: boolean | undefined;
  /** Captured output per stream (default RUN_COMMAND_OUTPUT_BYTES). */
  outputBytes?: number | undefined;
}

/** A command's working directory: inside the project, never in capsule's own state. */
async function resolveCwd(workspace: Workspace, cwd: string): Promise<ResolvedPath> {
  const resolved = await workspace.resolve(cwd, 'cwd');
  // The project root itself holds capsule.json and is the default cwd: only being inside counts.
  await workspace.assertWritable(resolved.real, 'cwd', cwd, { containing: false });
  return resolved;
}

/**
 * run_command: a host command through bash, gated by the engine's command keying. Not a sandbox, so
 * its keys reach the session allowlist at most. The one run_command of the agent catalog and of
 * `capsule exec`: the same keying, bash invocation and environment, so nothing can swap the keyed program.
 */
export function createRunCommandTool(
  options: RunCommandToolOptions,
): Tool<typeof runCommandParameters, CommandResult, RunCommandContext> {
  const processes = options.hostProcesses ?? new HostProcesses();
  return {
    name: 'run_command',
    description:
      'Run a bash command in the project root on the host (NOT a sandbox). Returns exit code, stdout and stderr.',
    kind: 'OTHER',
    parameters: runCommandParameters,
    async permission(args, ctx) {
      const cwd =
        args.cwd === undefined ? ctx.workspace.root : (await resolveCwd(ctx.workspace, args.cwd)).real;
      // The engine's keying: run_command:<program>, or the whole normalized string when compound;
      // a relative program is keyed by its path resolved in the folder it runs in.
      const check = commandPermission(ctx.commands, args.command, cwd);
      const rel = path.relative(ctx.workspace.root, cwd);
      if (rel === '' || check.permission.type !== 'ask' || !check.permission.key.compound) return check;
      // A compound command in a sub-folder is keyed as the command that does the same from the root,
      // so a grant for it at the root never covers it elsewhere.
      return commandPermission(ctx.commands, `cd -- ${singleQuoted(rel)}\n${args.command}`, cwd);
    },
    async execute(args, ctx): Promise<CommandResult> {
      const cwd =
        args.cwd === undefined ? ctx.workspace.root : (await resolveCwd(ctx.workspace, args.cwd)).real;
      const r = await processes.run({
        file: 'bash',
        args: bashArguments(args.command),
        cwd,
        env: shellEnvironment(options.env),
        output: options.passThrough === true ? 'inherit' : 'capture',
        outputBytes: options.outputBytes ?? RUN_COMMAND_OUTPUT_BYTES,
        timeoutMs: options.timeLimit === false ? undefined : args.timeoutMs,
        signal: ctx.signal,
        protection: (options.protection ?? ((w: Workspace) => w.hostProtection))(ctx.workspace),
      });
      if (r.startError !== undefined) {
        throw new CapsuleError('RUNNER_FAILED', `run_command could not start bash: ${r.startError}`);
      }
      return {
        command: args.command,
        exitCode: r.exitCode,
        signal: r.signal,
        stdout: r.stdout,
        stderr: r.stderr,
        timedOut: r.timedOut,
        canceled: r.canceled,
        truncated: r.truncated,
        durationMs: Math.round(r.durationMs),
      };
    },
  };
}
