import type { Command } from 'commander';
import { runExitCode } from '../exit-codes.js';
import { addGateFlags, type GateFlags } from '../flags.js';
import { action, cancelOnSignals, json, write, type CliIO } from '../output.js';
import { commandLine, positiveInt } from '../args.js';

/** `capsule exec --json` captures this much per stream; past it the command is stopped. */
const EXEC_CAPTURE_BYTES = 16 * 1024 * 1024;

async function redeemGrant(io: CliIO, id: string): Promise<string> {
  const [{ openProjectAt }, { cliOneUseGrants }] = await Promise.all([
    import('../../runtime/runtime.js'),
    import('../session.js'),
  ]);
  const project = await openProjectAt(io.cwd);
  const store = cliOneUseGrants(io);
  return (await store.redeem(id, project.root)).key;
}

export function registerExec(program: Command, io: CliIO): void {
  addGateFlags(
    program
      .command('exec')
      .description(
        'Run a shell command through the permission gate (the run_command tool). It runs with bash in the\n' +
          "project root only if allowed; its stdout/stderr pass through and its exit code is capsule's.\n" +
          'A denial exits 77 and says which key to grant. Compound commands need their own whole-string grant.',
      )
      .argument('<command...>', "the command, after --, e.g. -- 'git status'")
      .option(
        '--timeout-ms <ms>',
        "wall-clock limit: past it the command's process group is killed and capsule exits 124 (default: none)",
      )
      .option(
        '--json',
        'print one JSON document {key, compound, decision, exitCode, signal, timedOut, canceled, truncated, stdout, stderr}',
      )
      .option(
        '--grant-id <id>',
        'redeem a one-use grant minted by capsule hook claude --confine (it covers exactly one key, once)',
      ),
  ).action(
    action(
      io,
      async (words: string[], opts: GateFlags & { json?: boolean; timeoutMs?: string; grantId?: string }) => {
        const command = commandLine(words);
        const [
          { createCommandParser },
          { createRunCommandTool, RUN_COMMAND_MAX_TIMEOUT_MS },
          { Workspace },
          { openSession },
        ] = await Promise.all([
          import('../../permissions/commands/parser.js'),
          import('../../tools/run-command.js'),
          import('../../tools/workspace.js'),
          import('../session.js'),
        ]);
        const timeoutMs =
          opts.timeoutMs === undefined
            ? undefined
            : positiveInt(opts.timeoutMs, '--timeout-ms', RUN_COMMAND_MAX_TIMEOUT_MS);
        const parser = await createCommandParser();
        // A one-use grant counts only as capsule minted it (in its per-user state, by id): taken here, once.
        const redeemed = opts.grantId === undefined ? [] : [`once=${await redeemGrant(io, opts.grantId)}`];
        const session = await openSession(io, {
          grants: opts.grant,
          grantFor: [...(opts.grantFor ?? []), ...redeemed],
          noPrompt: !opts.prompt,
          mode: opts.mode,
          parser,
        });
        // Ctrl-C (SIGINT) or SIGTERM stops the command's whole process group: nothing outlives capsule.
        const cancel = cancelOnSignals(io.signals, ['SIGINT', 'SIGTERM']);
        try {
          // The agent's run_command, with the terminal's output and a wall-clock limit only when asked for.
          const tool = createRunCommandTool({
            env: io.env,
            passThrough: opts.json !== true,
            timeLimit: timeoutMs !== undefined,
            outputBytes: EXEC_CAPTURE_BYTES,
            protection: () => session.hostProtection,
          });
          const workspace = await Workspace.open({ projectRoot: session.project.root });
          const { decision, result } = await session.executor.call(
            tool,
            timeoutMs === undefined ? { command } : { command, timeoutMs },
            { signal: cancel.signal, workspace, commands: parser },
          );
          // The limit that ended the command decides, as for a capability run (docs/cli.md).
          const code = runExitCode(result);
          if (opts.json) {
            const key = decision?.key;
            await write(
              io.stdout,
              json({ key, compound: parser.analyze(command).compound, decision, ...result }),
            );
          } else if (result.timedOut || result.canceled || result.truncated) {
            const why = result.timedOut
              ? `timed out after ${timeoutMs} ms (--timeout-ms)`
              : result.canceled
                ? 'was canceled'
                : `passed ${EXEC_CAPTURE_BYTES} bytes of output`;
            await write(io.stderr, `capsule: the command ${why} and was stopped\n`);
          }
          return code;
        } finally {
          cancel.detach();
          await session.close();
          parser.close();
        }
      },
    ),
  );
}
