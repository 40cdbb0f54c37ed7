import type { Command } from 'commander';
import { action, type CliIO } from '../output.js';
import type { RulesCheckOptions } from './rules-check.js';

export function registerRules(program: Command, io: CliIO): void {
  const rules = program.command('rules').description('Inspect permission rules.');
  rules
    .command('check')
    .description(
      'Search for counterexamples to every run_command allow and deny rule in effect (capsule.json,\n' +
        'every profile, --grant) with the real bash parser: commands an allow rule admits that run a\n' +
        'program it does not name, and rewrites a deny rule misses. Exits 1 if any is found.',
    )
    .option('--json', 'print one JSON document {findings, claude, counterexamples}')
    .option('--profile <name>', 'check only this profile (default: every built-in and project profile)')
    .option(
      '--grant <key>',
      'also check a session grant as it would be given (repeatable)',
      (v: string, prev: string[] = []) => [...prev, v],
      [],
    )
    .option('--claude-settings <file>', "also judge a Claude Code settings.json's permissions block")
    .action(
      action(io, async (opts: RulesCheckOptions) => {
        const { rulesCheck } = await import('./rules-check.js');
        return rulesCheck(io, opts);
      }),
    );
}
