import type { Command } from 'commander';
import { CapsuleError } from '../../errors.js';
import { EXIT } from '../exit-codes.js';
import { action, write, type CliIO } from '../output.js';

/**
 * The command after `--`: one word is the command line as given (`-- 'git status && ls'`); several
 * words (`-- git commit -m "a b"`) are re-quoted one by one, so the shell sees the same words.
 */
export function commandLine(words: readonly string[]): string {
  const command =
    words.length === 1
      ? (words[0] as string)
      : words
          .map((w) => (/^[A-Za-z0-9_./:=@%+,-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`))
          .join(' ');
  if (command.trim() === '') {
    throw new CapsuleError('USAGE', 'No command given.', {
      hint: `Pass it after --, e.g. -- 'git status && ls'.`,
    });
  }
  return command;
}

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
        const { createCommandParser, keyCommand } = await import('../../permissions/command-parser.js');
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
