import type { Command } from 'commander';
import { action, type CliIO } from '../output.js';
import type { RulesCheckOptions } from './rules-check.js';
import type { RulesImportOptions } from './rules-import.js';

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
  rules
    .command('import')
    .description(
      "Import a Claude Code settings.json's permissions (allow, deny, ask) into capsule.json. Shows what " +
        'each rule becomes and the difference; writes only with --write after a yes (terminal or --yes). ' +
        'Deny rules are imported wherever capsule has the tool. An allow the ceiling rule forbids at project ' +
        'level (Bash, Edit: host tools) is reported and left out, never widened; what has no counterpart ' +
        '(Read deny, WebFetch) is reported with the reason.',
    )
    .option(
      '--claude-settings <file>',
      'the Claude Code settings.json to import (e.g. .claude/settings.json)',
    )
    .option('--write', 'write the rules into capsule.json after a yes (atomic: all or nothing)')
    .option(
      '--yes',
      'with --write: the person running this says yes in advance (never implied by --no-prompt)',
    )
    .option('--no-prompt', 'never ask: with --write, nothing is written (exit 77)')
    .option('--json', 'print {file, settings, entries, add, diff, written, message}')
    .action(
      action(io, async (opts: RulesImportOptions) => {
        const { rulesImport } = await import('./rules-import.js');
        return rulesImport(io, opts);
      }),
    );
}
