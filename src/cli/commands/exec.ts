import type { Command } from 'commander';
import { EXIT } from '../exit-codes.js';
import { addGateFlags, type GateFlags } from '../flags.js';
import { action, json, write, type CliIO } from '../output.js';
import { commandLine } from '../args.js';

/** `capsule exec --json` captures this much per stream; past it the command is stopped. */
const EXEC_CAPTURE_BYTES = 16 * 1024 * 1024;

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
        '--json',
        'print one JSON document {key, compound, decision, exitCode, signal, stdout, stderr}',
      ),
  ).action(
    action(io, async (words: string[], opts: GateFlags & { json?: boolean }) => {
      const command = commandLine(words);
      const [
        { createCommandParser },
        { createRunCommandTool },
        { Workspace },
        { openSession },
        { exitStatus },
      ] = await Promise.all([
        import('../../permissions/command-parser.js'),
        import('../../tools/run-command.js'),
        import('../../tools/workspace.js'),
        import('../session.js'),
        import('../../runners/exit-status.js'),
      ]);
      const parser = await createCommandParser();
      const session = await openSession(io, {
        grants: opts.grant,
        noPrompt: !opts.prompt,
        mode: opts.mode,
        parser,
      });
      const abort = new AbortController();
      const onSigint = (): void => abort.abort();
      io.signals.on('SIGINT', onSigint);
      try {
        // The agent's run_command, with the terminal's output and no wall-clock limit.
        const tool = createRunCommandTool({
          env: io.env,
          passThrough: opts.json !== true,
          timeLimit: false,
          outputBytes: EXEC_CAPTURE_BYTES,
          readOnlyPaths: () => session.hostReadOnly,
        });
        const workspace = await Workspace.open({ projectRoot: session.project.root });
        const { decision, result } = await session.executor.call(
          tool,
          { command },
          { signal: abort.signal, workspace, commands: parser },
        );
        const code = exitStatus(result.exitCode, result.signal, EXIT.FAILURE);
        if (opts.json) {
          const key = decision?.key;
          await write(
            io.stdout,
            json({ key, compound: parser.analyze(command).compound, decision, ...result }),
          );
        }
        return code;
      } finally {
        io.signals.removeListener('SIGINT', onSigint);
        await session.close();
        parser.close();
      }
    }),
  );
}
