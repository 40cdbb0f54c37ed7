// `capsule rules import`'s work, loaded only when the command runs (see rules.ts).
import { homedir } from 'node:os';
import path from 'node:path';
import { addPermissionRules } from '../../project/config-store.js';
import { loadProjectConfig } from '../../project/project-config.js';
import { CapsuleError } from '../../base/errors.js';
import {
  planClaudeImport,
  readClaudeSettings,
  type ClaudeImportEntry,
  type ImportOutcome,
} from '../../permissions/claude-settings.js';
import { policyChange, policyViewOf } from '../../permissions/policy-diff.js';
import { askYesNo, promptSafe } from '../../permissions/prompter.js';
import { EXIT } from '../exit-codes.js';
import { json, write, type CliIO } from '../output.js';
import { cliPolicySnapshots } from '../session.js';

export interface RulesImportOptions {
  claudeSettings?: string;
  write?: boolean;
  yes?: boolean;
  /** false with --no-prompt. */
  prompt: boolean;
  json?: boolean;
}

const HEADINGS: Record<ImportOutcome, string> = {
  import: 'Imported into capsule.json',
  'left-out': 'Left out (the ceiling rule forbids them at project level)',
  unmapped: 'Not mapped (no capsule counterpart)',
  'nothing-to-do': 'Nothing to write',
};

function render(entries: readonly ClaudeImportEntry[]): string {
  let out = '';
  for (const outcome of ['import', 'left-out', 'unmapped', 'nothing-to-do'] as const) {
    const some = entries.filter((e) => e.outcome === outcome);
    if (some.length === 0) continue;
    out += `${HEADINGS[outcome]}:\n`;
    for (const e of some) {
      const as = e.rules.length > 0 ? ` → ${e.rules.map((r) => promptSafe(r)).join(', ')}` : '';
      out += `  ${e.kind} ${promptSafe(e.text)}${as}\n      ${promptSafe(e.why)}\n`;
    }
  }
  return out;
}

/**
 * Import a Claude Code settings file's permission rules into capsule.json: the difference is shown,
 * and only a person's yes (at the terminal, or --yes) writes it, in one atomic step.
 */
export async function rulesImport(io: CliIO, opts: RulesImportOptions): Promise<number> {
  if (opts.claudeSettings === undefined)
    throw new CapsuleError('USAGE', 'capsule rules import needs --claude-settings FILE.', {
      field: '--claude-settings',
      hint: 'e.g. capsule rules import --claude-settings .claude/settings.json --write',
    });
  const settingsFile = path.resolve(io.cwd, opts.claudeSettings);
  const settings = await readClaudeSettings(settingsFile);
  const project = await loadProjectConfig(io.cwd);
  const plan = planClaudeImport(
    settings,
    { projectRoot: project.root, settingsFile, home: io.env.HOME ?? homedir() },
    project.config.permissions,
  );
  const before = policyViewOf(project.config);
  const after = policyViewOf({
    ...project.config,
    permissions: {
      allow: [...project.config.permissions.allow, ...plan.allow],
      deny: [...project.config.permissions.deny, ...plan.deny],
    },
  });
  const change = policyChange(project.file, before, after);
  const diff = change?.lines ?? [];
  if (opts.json !== true) {
    await write(io.stdout, render(plan.entries));
    await write(
      io.stdout,
      diff.length > 0
        ? `\n${project.file} would change:\n${diff.map((l) => `  ${l}`).join('\n')}\n`
        : `\n${project.file} would not change.\n`,
    );
  }
  let written = false;
  let message: string;
  if (diff.length === 0) message = 'Nothing to write.';
  else if (opts.write !== true) message = 'Nothing written (add --write to write it).';
  else if (!opts.prompt) message = 'Not written: --no-prompt never writes (a person says yes, or --yes).';
  else if (opts.yes !== true && !io.interactive)
    message = 'Not written: no terminal to ask a person (--yes writes without asking).';
  else if (
    opts.yes !== true &&
    !(await askYesNo({ input: io.stdin(), output: io.stderr }, `Write these rules to ${project.file}?`))
  )
    message = 'Not written: the answer was no.';
  else {
    // One locked read-modify-write and rename: the file is the old one or the new one, never half.
    const added = await addPermissionRules(project.file, { allow: plan.allow, deny: plan.deny });
    written = true;
    await keepConfirmedInStep(io, project.root, added);
    message = `Written: ${added.deny.length} deny and ${added.allow.length} allow rule(s) added to ${project.file}.`;
  }
  if (opts.json === true)
    await write(
      io.stdout,
      json({
        file: project.file,
        settings: settingsFile,
        entries: plan.entries,
        add: { allow: plan.allow, deny: plan.deny },
        diff,
        written,
        message,
      }),
    );
  else await write(io.stderr, `capsule: ${message}\n`);
  return opts.write === true && diff.length > 0 && !written ? EXIT.DENIED : EXIT.OK;
}

/**
 * A person said yes to these rules: a confirmed policy on record takes them too (only them; whatever
 * else changed on disk still waits for capsule reload), so the next session does not hold them back.
 */
async function keepConfirmedInStep(
  io: CliIO,
  root: string,
  added: { allow: string[]; deny: string[] },
): Promise<void> {
  const store = cliPolicySnapshots(io);
  const read = await store.load(root);
  if (read.state !== 'confirmed') return;
  const policy = read.snapshot.policy;
  const union = (a: readonly string[], b: readonly string[]): string[] => [
    ...a,
    ...b.filter((r) => !a.includes(r)),
  ];
  await store.write(
    root,
    { ...policy, allow: union(policy.allow, added.allow), deny: union(policy.deny, added.deny) },
    'capsule rules import',
  );
}
