import type { Command } from 'commander';
import { EXIT } from '../exit-codes.js';
import { commandLine } from '../args.js';
import { action, write, type CliIO } from '../output.js';

export function registerKey(program: Command, io: CliIO): void {
  program
    .command('key')
    .description(
      'Print the permission key of a shell command (the bash parser decides simple vs compound).\n' +
        'Simple: run_command:<program>. Compound (operators, pipes, substitutions, redirections, …): the whole normalized command.',
    )
    .argument('<command...>', "the command, after --, e.g. -- 'git status && ls'")
    .option('--json', 'print exactly {"tool":"run_command","key":"…","compound":true|false}')
    .action(
      action(io, async (words: string[], opts: { json?: boolean }) => {
        const command = commandLine(words);
        const [{ createCommandParser }, { keyCommand }] = await Promise.all([
          import('../../permissions/commands/parser.js'),
          import('../../permissions/commands/permission.js'),
        ]);
        const parser = await createCommandParser();
        try {
          const analysis = parser.analyze(command);
          const k = keyCommand(parser, command);
          if (opts.json) {
            await write(io.stdout, `${JSON.stringify({ tool: k.tool, key: k.key, compound: k.compound })}\n`);
          } else {
            const why = k.compound ? `compound: ${analysis.reasons.join('; ')}` : 'simple';
            await write(io.stdout, `${k.key}  (${why})\n`);
          }
          return EXIT.OK;
        } finally {
          parser.close();
        }
      }),
    );
}
