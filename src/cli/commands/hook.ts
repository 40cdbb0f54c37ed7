import type { Command } from 'commander';
import { action, type CliIO } from '../output.js';
import type { HookCommandOptions } from './hook-install.js';

export function registerHook(program: Command, io: CliIO): void {
  const hook = program
    .command('hook')
    .description('Judge the tool calls of another agent with capsule’s gate.');
  hook
    .command('claude')
    .description(
      'Claude Code PreToolUse hook: reads one envelope on stdin and answers in Claude Code’s format.\n' +
        'Bash is judged as run_command (deny rules of capsule.json and of the Claude settings files hold;\n' +
        'compound or unprovable commands are asked); Read/Edit/Write/MultiEdit/NotebookEdit as the file\n' +
        'tools (never capsule’s state, never outside the project). No output: capsule has no objection and\n' +
        'Claude Code’s own rules decide. An envelope that cannot be judged is denied.',
    )
    .option(
      '--confine',
      'run every Bash call capsule lets pass through capsule exec (own pid namespace, capsule’s state read-only, the call’s timeout a stop), with a one-use grant for exactly its key',
    )
    .option('--install', 'add this hook to Claude Code’s settings (shows the change, asks first)')
    .option('--uninstall', 'remove exactly the hook --install added')
    .option('--project', 'with --install/--uninstall: the project’s .claude/settings.json (default)')
    .option('--user', 'with --install/--uninstall: the user’s ~/.claude/settings.json')
    .option('--yes', 'with --install/--uninstall: write without asking (the change is still shown)')
    .option(
      '--json',
      'with --install/--uninstall: print {file, action, written, diff}; the hook’s own answer is JSON either way',
    )
    .action(
      action(io, async (opts: HookCommandOptions) => {
        if (opts.install === true || opts.uninstall === true) {
          const { hookInstall } = await import('./hook-install.js');
          return hookInstall(io, opts);
        }
        const { hookClaude } = await import('./hook-claude.js');
        return hookClaude(io, { confine: opts.confine });
      }),
    );
}
