import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { CapsuleError } from '../errors.js';

/** The `permissions` block of a Claude Code settings.json. */
export const claudePermissionsSchema = z
  .object({
    allow: z.array(z.string()).default([]).describe('Rules that run without asking, e.g. Bash(git diff:*).'),
    deny: z.array(z.string()).default([]).describe('Rules that are always refused.'),
    ask: z.array(z.string()).default([]).describe('Rules that always ask.'),
  })
  .describe('Claude Code permission rules.');

/** The parts of a Claude Code settings.json capsule reads (every other key is kept as it is and ignored). */
export const claudeSettingsSchema = z.looseObject({
  permissions: claudePermissionsSchema.optional().describe('Claude Code permission rules (optional).'),
  hooks: z
    .record(z.string(), z.unknown())
    .optional()
    .describe('Hooks by event name; `capsule hook claude --install` adds one under PreToolUse.'),
});

export type ClaudeSettings = z.infer<typeof claudeSettingsSchema>;
export type ClaudePermissions = z.infer<typeof claudePermissionsSchema>;

/**
 * Where a Claude Code settings file lives, and so who stands behind it: `user` is the person's own
 * (`~/.claude/settings.json`, outside every repository); `project` (`.claude/settings.json`) and
 * `local` (`.claude/settings.local.json`) lie in the project folder, which a repository brings.
 */
export type ClaudeSettingsScope = 'user' | 'project' | 'local';

export interface ClaudeSettingsFile {
  scope: ClaudeSettingsScope;
  file: string;
}

/** The Claude Code settings files of a project and a person, in Claude Code's own order. */
export function claudeSettingsFiles(projectRoot: string, home: string): ClaudeSettingsFile[] {
  return [
    { scope: 'user', file: path.join(home, '.claude', 'settings.json') },
    { scope: 'project', file: path.join(projectRoot, '.claude', 'settings.json') },
    { scope: 'local', file: path.join(projectRoot, '.claude', 'settings.local.json') },
  ];
}

/**
 * Read and validate one Claude Code settings file. `missing: 'skip'` returns undefined for a file that
 * does not exist; anything unreadable, not JSON or of the wrong shape is an error naming the file.
 */
export async function readClaudeSettings(
  file: string,
  options: { missing?: 'skip' | 'error'; field?: string } = {},
): Promise<{ settings: ClaudeSettings; text: string } | undefined> {
  const field = options.field ?? 'permissions';
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && options.missing === 'skip') return undefined;
    throw new CapsuleError(
      'NOT_FOUND',
      `Cannot read ${file}: ${(err as Error).message}`,
      { file, field },
      { cause: err },
    );
  }
  let doc: unknown;
  try {
    doc = text.trim() === '' ? {} : JSON.parse(text);
  } catch (err) {
    throw new CapsuleError(
      'USAGE',
      `${file} is not JSON: ${(err as Error).message}`,
      { file, field },
      { cause: err },
    );
  }
  const parsed = claudeSettingsSchema.safeParse(doc);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue === undefined ? '' : issue.path.join('.');
    throw new CapsuleError(
      'USAGE',
      `${file}: ${at === '' ? 'the document' : at} is not valid Claude Code settings: ${issue?.message ?? parsed.error.message}`,
      {
        file,
        field: at === '' ? field : at,
        hint: 'Expected {"permissions":{"allow":["Bash(git diff:*)"],"deny":[...]}}.',
      },
    );
  }
  return { settings: parsed.data, text };
}
