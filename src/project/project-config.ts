import { stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { enginesSchema } from './engines.js';
import { CapsuleError } from '../base/errors.js';
import { fileIssues } from '../base/zod-issues.js';
import { keysOfSyntax } from '../base/record-keys.js';
import { parseStrictJson } from '../base/strict-json.js';
import { ENVIRONMENTS } from './environments.js';
import { KEY_SYNTAX, RULE_SYNTAX } from './key-syntax.js';
import { grantNeverMatches, ruleNeverMatches } from './never-matches.js';

/** Rules that can never match are refused with the file and the rule's index as the field. */
function neverMatchingRules(kind: 'allow' | 'deny') {
  return (rules: string[], ctx: z.RefinementCtx): void => {
    for (const [i, rule] of rules.entries()) {
      const m = RULE_SYNTAX.exec(rule.trim());
      if (m === null || m[1] === undefined) continue;
      const never = ruleNeverMatches(kind, m[1], m[2]);
      if (never !== undefined)
        ctx.addIssue({
          code: 'custom',
          path: [i],
          message: `${rule} can never match: ${never.why}. ${never.hint}`,
        });
    }
  };
}
import { PERMISSION_MODES, type PermissionMode } from './modes.js';
import { readOptionalFile } from '../base/optional-file.js';

export const PROJECT_CONFIG_FILE = 'capsule.json';

export { PERMISSION_MODES, type PermissionMode };

/** Levels a capsule.json allowlist entry may hold. Once / AlwaysThisSession never reach the file. */
export const PROJECT_ENTRY_LEVELS = ['AlwaysThisProject', 'Deny'] as const;
export type ProjectEntryLevel = (typeof PROJECT_ENTRY_LEVELS)[number];

const CONTENT_HASH = /^sha256:[0-9a-f]{64}$/;

const ENTRY_LEVEL_MESSAGE =
  'must be "AlwaysThisProject", "Deny" or an object {"level", "contentHash"}; session grants live in memory only (use --grant KEY)';

export const allowlistEntrySchema = z
  .union(
    [
      z.enum(PROJECT_ENTRY_LEVELS),
      z.strictObject({
        level: z.enum(PROJECT_ENTRY_LEVELS).describe('AlwaysThisProject (allow) or Deny.'),
        contentHash: z
          .string()
          .regex(CONTENT_HASH, 'must be sha256:<64 hex digits>')
          .optional()
          .describe(
            'Capability content hash the grant is bound to. A capability grant without it never applies (ask again).',
          ),
        environment: z.enum(ENVIRONMENTS).optional().describe('Environment at grant time (informational).'),
        grantedAt: z.string().optional().describe('ISO time of the grant (informational).'),
        note: z.string().optional().describe('Free text for humans.'),
      }),
    ],
    { error: ENTRY_LEVEL_MESSAGE },
  )
  .describe('A project allowlist entry: a level, or an object with the level and the bound content hash.');

export type AllowlistEntryInput = z.infer<typeof allowlistEntrySchema>;

/** An allowlist entry in one shape, whatever form it had in the file. */
export interface AllowlistEntry {
  key: string;
  level: ProjectEntryLevel;
  contentHash?: string | undefined;
  environment?: string | undefined;
  grantedAt?: string | undefined;
}

export function normalizeAllowlist(allowlist: Record<string, AllowlistEntryInput>): AllowlistEntry[] {
  return Object.entries(allowlist).map(([key, value]) =>
    typeof value === 'string'
      ? { key, level: value }
      : {
          key,
          level: value.level,
          contentHash: value.contentHash,
          environment: value.environment,
          grantedAt: value.grantedAt,
        },
  );
}

export const projectConfigSchema = z
  .strictObject({
    schemaVersion: z.literal(1).default(1).describe('capsule.json format version. Currently 1.'),
    roots: z
      .array(z.string().min(1))
      .min(1)
      .default(['capabilities'])
      .describe('Capability roots, relative to the project root. Each holds one folder per capability.'),
    mode: z
      .enum(PERMISSION_MODES)
      .default('default')
      .describe('Permission mode at start: default | plan | edit | bypass. `--mode` overrides it.'),
    allowlist: z
      .record(z.string(), allowlistEntrySchema)
      .superRefine(
        keysOfSyntax(
          KEY_SYNTAX,
          'is not a permission key (expected TOOL:ACTION, e.g. run_capability:hello)',
          (key, ctx) => {
            const i = key.indexOf(':');
            const never = grantNeverMatches(key.slice(0, i), key.slice(i + 1));
            if (never !== undefined)
              ctx.addIssue({
                code: 'custom',
                path: [key],
                message: `can never match: ${never.why}. ${never.hint}`,
              });
          },
        ),
      )
      .default({})
      .describe(
        'Project allowlist: permission key → level. Read at start and on explicit reload only. run_command keys and unsandboxed capabilities are refused here (ceiling rule).',
      ),
    permissions: z
      .strictObject({
        allow: z
          .array(z.string().regex(RULE_SYNTAX, 'must be Tool or Tool(glob), e.g. run_command(git *)'))
          .superRefine(neverMatchingRules('allow'))
          .default([])
          .describe('Allow rules `Tool` or `Tool(glob)`.'),
        deny: z
          .array(z.string().regex(RULE_SYNTAX, 'must be Tool or Tool(glob), e.g. run_command(rm *)'))
          .superRefine(neverMatchingRules('deny'))
          .default([])
          .describe('Deny rules `Tool` or `Tool(glob)`; deny from any source wins.'),
      })
      .default({ allow: [], deny: [] })
      .describe('Rules evaluated before the mode: deny → allow → mode → Ask.'),
    engines: enginesSchema.optional(),
  })
  .describe('capsule.json: the project configuration, at the project root.');

export type ProjectConfig = z.infer<typeof projectConfigSchema>;

export interface LoadedProjectConfig {
  /** Real path of the project root (the folder holding capsule.json, or the cwd). */
  root: string;
  /** Absolute path of capsule.json (it may not exist). */
  file: string;
  exists: boolean;
  config: ProjectConfig;
}

/** The project root is the nearest ancestor holding capsule.json, else the current directory. */
export async function findProjectRoot(cwd: string): Promise<{ root: string; exists: boolean }> {
  let dir = path.resolve(cwd);
  for (;;) {
    try {
      const st = await stat(path.join(dir, PROJECT_CONFIG_FILE));
      if (st.isFile()) return { root: dir, exists: true };
    } catch {
      // not here; keep walking up
    }
    const parent = path.dirname(dir);
    if (parent === dir) return { root: path.resolve(cwd), exists: false };
    dir = parent;
  }
}

/** Pure: parse capsule.json text; errors name the file and the field. */
export function parseProjectConfig(text: string, file: string): ProjectConfig {
  const json = parseStrictJson(text);
  if (!json.ok) {
    const message =
      json.kind === 'duplicate-key'
        ? `${file} is invalid: ${json.message}`
        : `${file} is not valid JSON: ${json.message}`;
    throw new CapsuleError('CONFIG_INVALID', message, {
      file,
      field: json.field,
      hint: 'Fix the JSON by hand; capsule never overwrites a file it cannot read.',
    });
  }
  const parsed = projectConfigSchema.safeParse(json.value);
  if (!parsed.success) {
    const issues = fileIssues(parsed.error, json.value, file);
    const first = issues[0];
    throw new CapsuleError(
      'CONFIG_INVALID',
      `${file} is invalid: ${first?.field ?? '(top level)'} ${first?.message ?? ''}`.trim(),
      { file, field: first?.field, issues, hint: 'See docs/permissions.md for the capsule.json format.' },
    );
  }
  return parsed.data;
}

export async function loadProjectConfig(cwd: string): Promise<LoadedProjectConfig> {
  const { root } = await findProjectRoot(cwd);
  const file = path.join(root, PROJECT_CONFIG_FILE);
  const { exists, config } = await readProjectConfigFile(file);
  return { root, file, exists, config };
}

/** Read and validate one capsule.json; a missing file gives the defaults (empty allowlist). */
export async function readProjectConfigFile(
  file: string,
): Promise<{ exists: boolean; config: ProjectConfig }> {
  let text: string | undefined;
  try {
    text = await readOptionalFile(file, 'utf8');
  } catch (err) {
    throw new CapsuleError(
      'CONFIG_INVALID',
      `${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'}).`,
      {
        file,
        hint: 'Check that capsule.json is a readable file.',
      },
      { cause: err },
    );
  }
  if (text === undefined) return { exists: false, config: projectConfigSchema.parse({}) };
  return { exists: true, config: parseProjectConfig(text, file) };
}
