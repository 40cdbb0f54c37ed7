import type { Command } from 'commander';
import { CapsuleError } from '../../base/errors.js';
import type { CommandParser } from '../../permissions/commands/parser.js';
import type { Explanation } from '../../permissions/engine.js';
import { makeKey, RUN_CAPABILITY } from '../../permissions/keys.js';
import type { PermissionRequest } from '../../permissions/types.js';
import { EXIT } from '../exit-codes.js';
import { addGateFlags, sessionFlags, type GateFlags } from '../flags.js';
import { action, json, write, type CliIO } from '../output.js';

/** Pure: the human-readable explanation. */
export function renderExplanation(request: PermissionRequest, x: Explanation, noPrompt: boolean): string {
  const lines = [
    `key:        ${request.key.raw}${request.key.compound ? '  (compound: only this exact string is covered)' : ''}`,
    `mode:       ${x.mode}`,
    `sandbox:    ${request.isolation ?? (request.sandboxed ? 'sandboxed' : 'not sandboxed')}`,
    `ceiling:    ${x.ceiling.ceiling === 'project' ? 'project allowlist allowed' : 'session allowlist at most'} (${x.ceiling.reason})`,
  ];
  if (request.contentHash !== undefined) lines.push(`hash:       ${request.contentHash}`);
  let outcome: string;
  if (x.outcome === 'ask') {
    outcome = noPrompt
      ? 'deny (Ask, and --no-prompt / no terminal: exit 77)'
      : `ask (${(x.options ?? []).join(' / ')})`;
  } else if (x.outcome === 'error') {
    outcome = `error ${x.error?.code ?? ''}: ${x.reason}`;
  } else {
    outcome = `${x.outcome} by ${x.source}${x.matched !== undefined ? ` "${x.matched}"` : ''}`;
  }
  lines.push(`decision:   ${outcome}`, `reason:     ${x.reason}`, 'steps:');
  for (const step of x.trace)
    lines.push(`  ${step.step.padEnd(18)} ${step.matched ? 'yes' : 'no '}  ${step.detail}`);
  return `${lines.join('\n')}\n`;
}

export function registerExplain(program: Command, io: CliIO): void {
  addGateFlags(
    program
      .command('explain')
      .description(
        'Explain the permission decision for a shell command (after --) or a capability (--capability NAME):\n' +
          'which rule, allowlist entry or mode decides and why, the ceiling and the sandbox. Nothing runs, nothing is asked.',
      )
      .argument('[command...]', "the command, after --, e.g. -- 'git push'")
      .option('--capability <name>', 'explain run_capability for this capability instead of a command')
      .option('--json', 'print the explanation as JSON'),
  ).action(
    action(io, async (words: string[], opts: GateFlags & { capability?: string; json?: boolean }) => {
      const command = words.join(' ').trim();
      if ((command === '') === (opts.capability === undefined)) {
        throw new CapsuleError('USAGE', 'Give either a command after -- or --capability NAME.');
      }
      const { openSession } = await import('../session.js');
      let parser: CommandParser | undefined;
      if (command !== '')
        parser = await (await import('../../permissions/commands/parser.js')).createCommandParser();
      const session = await openSession(io, sessionFlags(opts, { parser }));
      try {
        let request: PermissionRequest;
        if (parser !== undefined) {
          const { commandRequest } = await import('../../permissions/commands/permission.js');
          request = commandRequest(parser, command, session.project.root);
        } else {
          const cap = await session.registry.get(opts.capability as string);
          const iso = session.executor.isolation(cap);
          request = {
            tool: RUN_CAPABILITY,
            kind: 'OTHER',
            key: makeKey(RUN_CAPABILITY, cap.name),
            subject: cap.name,
            sandboxed: iso.sandboxed,
            isolation: iso.summary,
            contentHash: cap.contentHash,
          };
        }
        const x = session.engine.explain(request);
        const noPrompt = !opts.prompt || !io.interactive;
        if (opts.json) {
          await write(
            io.stdout,
            json({ request: { ...request, key: request.key.raw, compound: request.key.compound }, ...x }),
          );
        } else {
          await write(io.stdout, renderExplanation(request, x, noPrompt));
        }
        return EXIT.OK;
      } finally {
        await session.close();
        parser?.close();
      }
    }),
  );
}
