import path from 'node:path';
import { execa } from 'execa';
import { z } from 'zod';
import { CapsuleError } from '../errors.js';
import type { RunResult } from '../runners/types.js';
import { bashArguments, commandCheck, shellEnvironment } from '../permissions/run-command-tool.js';
import { defineTool, type AgentTool } from './define.js';

export const RUN_COMMAND_DEFAULT_TIMEOUT_MS = 60_000;
export const RUN_COMMAND_MAX_TIMEOUT_MS = 10 * 60_000;
export const RUN_COMMAND_OUTPUT_BYTES = 1024 * 1024;
const KILL_GRACE_MS = 500;

/** The runners' result shape, for a command (no memory limit, so no oomKilled). */
export interface CommandResult extends Omit<RunResult, 'environment' | 'oomKilled'> {
  command: string;
}

const runCommandParameters = z.strictObject({
  command: z
    .string()
    .min(1)
    .max(64 * 1024)
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

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    // Negative pid: the whole process group (the command's own children included).
    process.kill(-pid, 'SIGKILL');
  } catch {
    // ESRCH: already gone.
  }
}

/** run_command: a host command through bash, gated by the engine's command keying. Not a sandbox. */
export function createRunCommandTool(): AgentTool {
  return defineTool({
    name: 'run_command',
    description:
      'Run a bash command in the project root on the host (NOT a sandbox). Returns exit code, stdout and stderr.',
    kind: 'OTHER',
    parameters: runCommandParameters,
    async permission(args, ctx) {
      const cwd =
        args.cwd === undefined ? ctx.workspace.root : (await ctx.workspace.resolve(args.cwd, 'cwd')).real;
      // The engine's keying: run_command:<program>, or the whole normalized string when compound;
      // a relative program is keyed by its path resolved in the folder it runs in.
      const check = commandCheck(ctx.commands, args.command, cwd);
      const rel = path.relative(ctx.workspace.root, cwd);
      if (rel === '' || check.permission.type !== 'ask' || !check.permission.key.compound) return check;
      // A compound command in a sub-folder is keyed as the command that does the same from the root,
      // so a grant for it at the root never covers it elsewhere.
      return commandCheck(ctx.commands, `cd -- '${rel.replace(/'/g, `'\\''`)}'\n${args.command}`, cwd);
    },
    async execute(args, ctx): Promise<CommandResult> {
      const cwd =
        args.cwd === undefined ? ctx.workspace.root : (await ctx.workspace.resolve(args.cwd, 'cwd')).real;
      const started = performance.now();
      // The same bash invocation and environment as `capsule exec`: nothing can swap the keyed program.
      const child = execa('bash', bashArguments(args.command), {
        cwd,
        env: shellEnvironment(process.env),
        extendEnv: false,
        reject: false,
        stdin: 'ignore',
        detached: true, // its own process group, so a kill reaches every descendant
        cleanup: true,
        stripFinalNewline: false,
        maxBuffer: RUN_COMMAND_OUTPUT_BYTES,
        encoding: 'utf8',
      });
      let timedOut = false;
      let canceled = false;
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup(child.pid);
      }, args.timeoutMs);
      const onAbort = (): void => {
        canceled = true;
        killGroup(child.pid);
      };
      if (ctx.signal?.aborted) onAbort();
      ctx.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        const r = await child;
        if (r.isMaxBuffer) killGroup(child.pid);
        return {
          command: args.command,
          exitCode: r.exitCode ?? null,
          signal: r.signal ?? null,
          stdout: String(r.stdout ?? ''),
          stderr: String(r.stderr ?? ''),
          timedOut,
          canceled,
          truncated: r.isMaxBuffer,
          durationMs: Math.round(performance.now() - started),
        };
      } catch (err) {
        throw new CapsuleError(
          'RUNNER_FAILED',
          `run_command could not start bash: ${(err as Error).message}`,
        );
      } finally {
        clearTimeout(timer);
        ctx.signal?.removeEventListener('abort', onAbort);
        // Leftover background children of a finished command are killed with the group after a grace.
        setTimeout(() => killGroup(child.pid), KILL_GRACE_MS).unref();
      }
    },
  });
}
