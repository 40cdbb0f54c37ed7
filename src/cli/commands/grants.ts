import type { Command } from 'commander';
import { normalizeAllowlist, type AllowlistEntry } from '../../config/project-config.js';
import { removeAllowlistEntry } from '../../config/config-store.js';
import { CapsuleError } from '../../errors.js';
import { RUN_COMMAND } from '../../permissions/keys.js';
import { EXIT } from '../exit-codes.js';
import { action, json, write, type CliIO } from '../output.js';
import { openProject } from '../session.js';

/** Pure: what a reader of capsule.json should know about an entry before it bites. */
export function entryProblem(entry: AllowlistEntry): string | undefined {
  if (entry.level !== 'AlwaysThisProject') return undefined;
  if (entry.key.startsWith(`${RUN_COMMAND}:`)) {
    return 'breaks the ceiling rule (run_command reaches the session at most): lookups fail with CEILING_VIOLATION';
  }
  if (entry.key.startsWith('run_capability:') && entry.contentHash === undefined) {
    return 'no contentHash: bound to nothing, never applies (capsule asks again)';
  }
  return undefined;
}

export function registerGrants(program: Command, io: CliIO): void {
  const grants = program
    .command('grants')
    .description(
      'List or revoke the project allowlist in capsule.json (session grants live only in their process).',
    );

  grants
    .command('list', { isDefault: true })
    .description(
      'List project allowlist entries, flagging ones that break the ceiling or are bound to nothing.',
    )
    .option('--json', 'print JSON: {file, entries}')
    .action(
      action(io, async (opts: { json?: boolean }) => {
        const { project } = await openProject(io);
        const entries = normalizeAllowlist(project.config.allowlist).map((e) => ({
          ...e,
          problem: entryProblem(e),
        }));
        if (opts.json) {
          await write(io.stdout, json({ file: project.file, entries }));
          return EXIT.OK;
        }
        if (entries.length === 0) {
          await write(io.stdout, `No project grants in ${project.file}.\n`);
          return EXIT.OK;
        }
        const lines = entries.map((e) => {
          const hash = e.contentHash !== undefined ? `  ${e.contentHash.slice(0, 19)}…` : '';
          return `${e.level.padEnd(17)}  ${e.key}${hash}${e.problem !== undefined ? `\n${' '.repeat(19)}! ${e.problem}` : ''}`;
        });
        await write(io.stdout, `${project.file}\n${lines.join('\n')}\n`);
        return EXIT.OK;
      }),
    );

  grants
    .command('revoke')
    .description('Remove one entry from the project allowlist (atomic write under a lock).')
    .argument('<key>', 'the key exactly as listed, e.g. run_capability:hello')
    .action(
      action(io, async (key: string) => {
        const { project } = await openProject(io);
        if (!project.exists || !(await removeAllowlistEntry(project.file, key))) {
          throw new CapsuleError('NOT_FOUND', `${key} is not in the project allowlist of ${project.file}.`, {
            key,
            file: project.file,
            hint: 'See capsule grants list.',
          });
        }
        await write(io.stdout, `Revoked ${key} in ${project.file}.\n`);
        return EXIT.OK;
      }),
    );
}
