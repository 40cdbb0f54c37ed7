import type { Command } from 'commander';
import type { AllowlistEntry } from '../../project/project-config.js';
import { CapsuleError } from '../../base/errors.js';
import { isWildcardGrant, RUN_CAPABILITY, RUN_COMMAND } from '../../permissions/keys.js';
import { EXIT } from '../exit-codes.js';
import { action, json, write, type CliIO } from '../output.js';

export type EntryFlag = 'ceiling' | 'over-broad' | 'stale' | 'unbound' | 'missing';

export interface EntryProblem {
  flag: EntryFlag;
  text: string;
}

/** What the project holds now under a `run_capability:<name>` entry's name (undefined: nothing valid). */
export interface CurrentCapability {
  contentHash: string;
  sandboxed: boolean;
  isolation: string;
}

const CEILING_FAILS = 'lookups fail with CEILING_VIOLATION';

/**
 * Pure: what a reader of capsule.json should know about an entry before it bites. `current` is the
 * capability a `run_capability:<name>` entry names, judged now (its hash and isolation), or undefined
 * when there is none by that name. Deny entries are never a problem: they can only take away.
 */
export function entryProblems(entry: AllowlistEntry, current?: CurrentCapability): EntryProblem[] {
  if (entry.level !== 'AlwaysThisProject') return [];
  const out: EntryProblem[] = [];
  const i = entry.key.indexOf(':');
  const tool = i < 0 ? entry.key : entry.key.slice(0, i);
  const wildcard = isWildcardGrant(entry.key);
  if (tool === RUN_COMMAND) {
    out.push({
      flag: 'ceiling',
      text: `breaks the ceiling rule (run_command reaches the session at most): ${CEILING_FAILS}`,
    });
  } else if (tool !== RUN_CAPABILITY) {
    out.push({
      flag: 'ceiling',
      text: `breaks the ceiling rule (${tool} works on the host, not in a sandbox: session at most): ${CEILING_FAILS}`,
    });
  }
  if (wildcard) {
    out.push({
      flag: 'over-broad',
      text:
        tool === RUN_CAPABILITY
          ? `a wildcard covers every capability, bound to no content: it never allows a sandboxed one and an unsandboxed one is a CEILING_VIOLATION`
          : `a wildcard covers every ${tool} call (${entry.key}), present and future`,
    });
    return out;
  }
  if (tool !== RUN_CAPABILITY) return out;
  if (current === undefined) {
    out.push({
      flag: 'missing',
      text: 'no valid capability of this name now (capsule list): it covers nothing',
    });
  } else if (!current.sandboxed) {
    out.push({ flag: 'ceiling', text: `breaks the ceiling rule (${current.isolation}): ${CEILING_FAILS}` });
    return out;
  }
  if (entry.contentHash === undefined) {
    out.push({
      flag: 'unbound',
      text: 'no contentHash: bound to nothing, never applies (capsule asks again)',
    });
  } else if (current !== undefined && current.contentHash !== entry.contentHash) {
    out.push({
      flag: 'stale',
      text: `stale: granted for ${entry.contentHash.slice(0, 19)}…, the capability is now ${current.contentHash.slice(0, 19)}…; never applies (capsule asks again)`,
    });
  }
  return out;
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
      'List project allowlist entries, flagging ones that break the ceiling, are over-broad wildcards, are stale\n' +
        '(the capability changed since), bound to nothing, or name no capability.',
    )
    .option('--json', 'print JSON: {file, entries: [{key, level, contentHash?, flags, problems, problem?}]}')
    .action(
      action(io, async (opts: { json?: boolean }) => {
        const [{ openProject }, { normalizeAllowlist }, { defaultIsolation }] = await Promise.all([
          import('../session.js'),
          import('../../project/project-config.js'),
          import('../../executor/isolation.js'),
        ]);
        const { project, registry } = await openProject(io);
        const scan = await registry.scan();
        const byName = new Map(scan.capabilities.map((c) => [c.name, c]));
        const entries = normalizeAllowlist(project.config.allowlist).map((e) => {
          const cap = e.key.startsWith(`${RUN_CAPABILITY}:`)
            ? byName.get(e.key.slice(RUN_CAPABILITY.length + 1))
            : undefined;
          const isolation = cap !== undefined ? defaultIsolation(cap) : undefined;
          const problems = entryProblems(
            e,
            cap !== undefined && isolation !== undefined
              ? { contentHash: cap.contentHash, sandboxed: isolation.sandboxed, isolation: isolation.summary }
              : undefined,
          );
          return {
            ...e,
            flags: problems.map((p) => p.flag),
            problems: problems.map((p) => p.text),
            problem: problems.length > 0 ? problems.map((p) => p.text).join('; ') : undefined,
          };
        });
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
          const flagged = e.problems.map((p) => `\n${' '.repeat(19)}! ${p}`).join('');
          return `${e.level.padEnd(17)}  ${e.key}${hash}${flagged}`;
        });
        await write(io.stdout, `${project.file}\n${lines.join('\n')}\n`);
        return EXIT.OK;
      }),
    );

  grants
    .command('revoke')
    .description('Remove one entry from the project allowlist (atomic write under a lock).')
    .argument('<key>', 'the key exactly as listed, e.g. run_capability:hello')
    .option('--json', 'print JSON: {file, revoked}')
    .action(
      action(io, async (key: string, opts: { json?: boolean }) => {
        const [{ openProject }, { removeAllowlistEntry }] = await Promise.all([
          import('../session.js'),
          import('../../project/config-store.js'),
        ]);
        const { project } = await openProject(io);
        if (!project.exists || !(await removeAllowlistEntry(project.file, key))) {
          throw new CapsuleError('NOT_FOUND', `${key} is not in the project allowlist of ${project.file}.`, {
            key,
            file: project.file,
            hint: 'See capsule grants list.',
          });
        }
        await write(
          io.stdout,
          opts.json === true
            ? json({ file: project.file, revoked: key })
            : `Revoked ${key} in ${project.file}.\n`,
        );
        return EXIT.OK;
      }),
    );
}
