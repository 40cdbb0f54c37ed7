/*
 * Claude Code's settings in capsule's terms (docs/permissions.md, "Claude Code settings"): the one
 * home of the mapping, for `capsule rules check --claude-settings` (judge), `capsule rules import`
 * (write into capsule.json) and anything else that reads a settings.json. Pure but for reading the file.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { CapsuleError, isCapsuleError } from '../base/errors.js';
import { readOptionalFile } from '../base/optional-file.js';
import { commandPermissionKey } from './commands/permission.js';
import type { CommandParser } from './commands/parser.js';
import { RULE_TOOLS } from '../project/never-matches.js';
import { parseRule, rulePatternProgram } from './rules.js';

/** The `permissions` block of a Claude Code settings.json (other keys are ignored). */
export const claudeSettingsSchema = z.object({
  permissions: z
    .object({
      allow: z
        .array(z.string())
        .default([])
        .describe('Rules that run without asking, e.g. Bash(git diff:*).'),
      deny: z.array(z.string()).default([]).describe('Rules that are always refused.'),
      ask: z.array(z.string()).default([]).describe('Rules that always ask.'),
    })
    .describe('Claude Code permission rules.'),
});

export type ClaudeSettings = z.infer<typeof claudeSettingsSchema>;

/** Read and check a Claude Code settings.json; errors name the file and `field` (the flag that gave it). */
export async function readClaudeSettings(file: string, field = '--claude-settings'): Promise<ClaudeSettings> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw cannotRead(file, { file, field })(err as Error);
  }
  const parsed = claudeSettingsSchema.safeParse(settingsJson(text, { file, field }));
  if (!parsed.success) {
    throw new CapsuleError('USAGE', `${file} has no valid "permissions" block: ${parsed.error.message}`, {
      file,
      field: 'permissions',
      hint: 'Expected {"permissions":{"allow":["Bash(git diff:*)"],"deny":[...]}}.',
    });
  }
  return parsed.data;
}

/** A settings file that exists but cannot be read; `details` name the file (and the flag that gave it). */
function cannotRead(file: string, details: { file: string; field?: string }) {
  return (err: Error) =>
    new CapsuleError('NOT_FOUND', `Cannot read ${file}: ${err.message}`, details, { cause: err });
}

/** A settings file's text as JSON, or a USAGE error naming the file (and the flag that gave it). */
function settingsJson(text: string, details: { file: string; field?: string }): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new CapsuleError('USAGE', `${details.file} is not JSON: ${(err as Error).message}`, details, {
      cause: err,
    });
  }
}

/** One Claude Code `permissions` rule and what capsule makes of it. */
export interface ForeignRule {
  kind: 'allow' | 'deny' | 'ask';
  text: string;
  /** capsule rules it maps to (empty: no capsule counterpart). */
  capsule: string[];
  /** How capsule keys a command the rule is written for (`run_command:git`, compound or not). */
  key?: { key: string; compound: boolean } | undefined;
  note: string;
}

/**
 * A Claude Code rule in capsule's terms. `Bash(prefix:*)` means the prefix followed by anything;
 * `Bash(text)` the exact command; other tools have no run_command counterpart.
 */
export function translateClaudeRule(
  parser: CommandParser,
  kind: ForeignRule['kind'],
  text: string,
  cwd: string,
): ForeignRule {
  const m = /^Bash(?:\(([\s\S]*)\))?$/.exec(text.trim());
  if (m === null) {
    const tool = /^([A-Za-z]+)/.exec(text)?.[1] ?? text;
    const map: Record<string, string> = { Edit: 'write_file', Write: 'write_file', MultiEdit: 'write_file' };
    const target = map[tool];
    return {
      kind,
      text,
      capsule: [],
      note:
        target === undefined
          ? `${tool} has no capsule counterpart: not judged`
          : `${tool} corresponds to ${target}: not judged here (this check searches run_command rules); capsule rules import maps its paths`,
    };
  }
  const body = m[1];
  if (body === undefined || body === '*' || body === ':*')
    return { kind, text, capsule: ['run_command'], note: 'every simple command (never a compound one)' };
  const prefix = body.endsWith(':*') ? body.slice(0, -2) : body;
  const capsule = body.endsWith(':*')
    ? [`run_command(${prefix})`, `run_command(${prefix} *)`]
    : [`run_command(${body})`];
  const sample = prefix.replace(/\*/g, 'x').trim();
  let key: ForeignRule['key'];
  let note: string;
  try {
    const analysis = parser.analyze(sample);
    const k = commandPermissionKey(analysis, cwd);
    key = { key: k.raw, compound: k.compound };
    if (kind === 'deny')
      note = `denies "${sample}" wherever it runs: behind wrappers, paths, quotes, pipelines and nested shells`;
    else if (kind === 'ask') note = `capsule asks for ${k.raw} unless a rule or grant covers it`;
    else
      note = k.compound
        ? `capsule keys "${sample}" as a compound command (${analysis.reasons.join('; ')}): only the exact string matches`
        : `capsule keys "${sample}" as ${k.raw}; the rule admits simple commands only, a compound one needs its own approval`;
  } catch (err) {
    if (!isCapsuleError(err)) throw err;
    note = `not a command capsule can key: ${err.message}`;
  }
  for (const r of capsule) parseRule(r, 'claude-settings');
  return { kind, text, capsule, key, note };
}

/** What importing one Claude Code rule into capsule.json does. */
export type ImportOutcome =
  /** Written into capsule.json (the rules in `rules`). */
  | 'import'
  /** Mapped, but the ceiling rule forbids it at project level: reported, never written. */
  | 'left-out'
  /** No capsule counterpart: reported, nothing written. */
  | 'unmapped'
  /** capsule already behaves so (or the rules are in capsule.json already): nothing to write. */
  | 'nothing-to-do';

export interface ClaudeImportEntry {
  kind: 'allow' | 'deny' | 'ask';
  text: string;
  outcome: ImportOutcome;
  /** The capsule rules it maps to (written for `import`; what it would have been for `left-out`). */
  rules: string[];
  why: string;
}

export interface ClaudeImportPlan {
  entries: ClaudeImportEntry[];
  /** Rules to add to capsule.json (none already there). */
  allow: string[];
  deny: string[];
}

/** Where a settings file's paths are resolved. */
export interface ClaudePaths {
  projectRoot: string;
  settingsFile: string;
  home: string;
}

const CLAUDE_RULE = /^([A-Za-z][A-Za-z0-9_-]*)(?:\(([\s\S]*)\))?$/;
const EDIT_TOOLS = new Set(['Edit', 'Write', 'MultiEdit', 'NotebookEdit']);
const READ_TOOLS = new Set(['Read', 'Grep', 'Glob', 'LS']);
const WEB_TOOLS = new Set(['WebFetch', 'WebSearch']);
/** Tools that always run on the host: the ceiling keeps an allow of theirs out of project files. */
const HOST_TOOLS = new Set(['run_command', 'write_file', 'edit_file']);

/** A Claude command pattern as a capsule rule glob: `*` stays a wildcard, other glob characters are literal. */
function commandGlob(text: string): string {
  return text.replace(/[\\?[\]]/g, (c) => `\\${c}`);
}

/** The capsule rules a `Bash(...)` body means. */
function bashRules(body: string | undefined): string[] {
  if (body === undefined || body.trim() === '' || body.trim() === '*') return ['run_command'];
  const b = body.trim();
  // `prefix:*` (and `prefix *` with no other wildcard): the prefix alone or followed by anything.
  const prefix = b.endsWith(':*')
    ? b.slice(0, -2)
    : b.endsWith(' *') && b.indexOf('*') === b.length - 1
      ? b.slice(0, -2)
      : undefined;
  if (prefix !== undefined && prefix.trim() !== '') {
    const p = commandGlob(prefix.trim());
    return [`run_command(${p})`, `run_command(${p} *)`];
  }
  return [`run_command(${commandGlob(b)})`];
}

/**
 * A Claude path pattern (gitignore style) as a path relative to the project root, or undefined when
 * it is outside. `//p` is absolute, `~/p` under the home folder, `/p` from the settings file's
 * project (the folder holding `.claude/`, else the file's folder), `p` and `./p` from the project root.
 */
function projectPath(pattern: string, where: ClaudePaths): string | undefined {
  const settingsDir = path.dirname(path.resolve(where.settingsFile));
  const settingsBase = path.basename(settingsDir) === '.claude' ? path.dirname(settingsDir) : settingsDir;
  const abs = pattern.startsWith('//')
    ? path.resolve(pattern.slice(1))
    : pattern.startsWith('~/')
      ? path.resolve(where.home, pattern.slice(2))
      : pattern.startsWith('/')
        ? path.resolve(settingsBase, pattern.slice(1))
        : path.resolve(where.projectRoot, pattern);
  const rel = path.relative(path.resolve(where.projectRoot), abs);
  if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) return undefined;
  return rel.split(path.sep).join('/');
}

/** The first reason one of `rules` can never match, if any. */
function neverMatching(kind: 'allow' | 'deny', rules: readonly string[]): string | undefined {
  for (const r of rules) {
    try {
      parseRule(r, 'the Claude Code settings', 'persistent', kind);
    } catch (err) {
      if (!isCapsuleError(err)) throw err;
      return err.message;
    }
  }
  return undefined;
}

/**
 * Pure: one Claude Code rule as capsule.json rules, ceiling-aware. A deny maps wherever capsule has
 * the tool (a deny never widens anything). An allow of a host tool (Bash, Edit …) is left out: a
 * project file cannot allow host code. An ask has no capsule rule: capsule asks unless something
 * allows, which is said per entry.
 */
export function mapClaudeRule(
  kind: ClaudeImportEntry['kind'],
  text: string,
  where: ClaudePaths,
): ClaudeImportEntry {
  const entry = (outcome: ImportOutcome, rules: string[], why: string): ClaudeImportEntry => ({
    kind,
    text,
    outcome,
    rules,
    why,
  });
  const m = CLAUDE_RULE.exec(text.trim());
  if (m === null) return entry('unmapped', [], 'not a Claude Code rule (Tool or Tool(specifier))');
  const tool = m[1] as string;
  const body = m[2];
  let rules: string[];
  let capsuleTool: string;
  if (tool === 'Bash') {
    rules = bashRules(body);
    capsuleTool = 'run_command';
  } else if (EDIT_TOOLS.has(tool)) {
    capsuleTool = 'write_file';
    const b = body?.trim();
    if (b === undefined || b === '' || b === '*' || b === '**') rules = ['write_file'];
    else {
      const rel = projectPath(b, where);
      if (rel === undefined)
        return entry(
          'nothing-to-do',
          [],
          `${b} is outside the project: capsule's file tools never write there, whatever the rule`,
        );
      rules = [`write_file(${rel})`];
    }
  } else if (READ_TOOLS.has(tool)) {
    return kind === 'allow'
      ? entry(
          'nothing-to-do',
          [],
          "capsule's read tools (read_file, grep, glob) never ask, inside the project root",
        )
      : entry(
          'unmapped',
          [],
          `capsule's read tools never ask and no rule judges them: a read inside the project root cannot be ${kind === 'deny' ? 'denied' : 'made to ask'} (keep secrets out of the project)`,
        );
  } else if (WEB_TOOLS.has(tool)) {
    return entry(
      'unmapped',
      [],
      "capsule's agent has no web tool: a capability reaches only the hosts its manifest declares (network grants), and host commands are not judged per domain",
    );
  } else {
    const mcp = /^mcp__capsule__([a-z][a-z0-9_]*)$/.exec(tool);
    if (mcp === null || !RULE_TOOLS.includes(mcp[1] as string))
      return entry(
        'unmapped',
        [],
        tool.startsWith('mcp__')
          ? "a tool of another MCP server (or one capsule's server does not have): capsule does not judge it"
          : `${tool} has no capsule counterpart`,
      );
    capsuleTool = mcp[1] as string;
    rules = [body === undefined ? capsuleTool : `${capsuleTool}(${body})`];
  }
  const never = neverMatching(kind === 'allow' ? 'allow' : 'deny', rules);
  if (never !== undefined) return entry('unmapped', rules, `in capsule it could never match: ${never}`);
  if (kind === 'deny')
    return entry('import', rules, 'denied wherever capsule judges it (a deny rule wins over every allow)');
  if (kind === 'ask')
    return entry(
      'nothing-to-do',
      rules,
      HOST_TOOLS.has(capsuleTool)
        ? 'capsule has no ask rules; it asks for this unless a --grant, an answer at a prompt or --mode allows it'
        : 'capsule has no ask rules; it asks for this unless a rule, a grant or the mode allows it',
    );
  if (HOST_TOOLS.has(capsuleTool)) {
    const grant =
      capsuleTool === 'run_command'
        ? rules[0] === 'run_command'
          ? '--grant run_command:*'
          : `--grant run_command:${rulePatternProgram(/^run_command\(([\s\S]*)\)$/.exec(rules[0] as string)?.[1] ?? '').replace(/\\(.)/g, '$1')}`
        : `--mode edit, or --grant 'write_file:${/^write_file\(([\s\S]*)\)$/.exec(rules[0] as string)?.[1] ?? '**'}'`;
    const acts = capsuleTool === 'run_command' ? 'runs commands' : 'writes files';
    return entry(
      'left-out',
      rules,
      `${capsuleTool} ${acts} on the host, outside any sandbox: a project file cannot allow it (the ceiling rule). Allow it per session instead (${grant})`,
    );
  }
  return entry('import', rules, 'allows sandboxed calls only: a project file never allows host code');
}

/** Pure: the whole permissions block; rules already in capsule.json (or given twice) are written once. */
export function planClaudeImport(
  settings: ClaudeSettings,
  where: ClaudePaths,
  existing: { allow: readonly string[]; deny: readonly string[] },
): ClaudeImportPlan {
  const plan: ClaudeImportPlan = { entries: [], allow: [], deny: [] };
  for (const kind of ['deny', 'allow', 'ask'] as const) {
    for (const text of settings.permissions[kind]) {
      const e = mapClaudeRule(kind, text, where);
      if (e.outcome === 'import' && (kind === 'allow' || kind === 'deny')) {
        const fresh = e.rules.filter((r) => !existing[kind].includes(r) && !plan[kind].includes(r));
        if (fresh.length === 0) {
          e.outcome = 'nothing-to-do';
          e.why = 'already in capsule.json';
        }
        plan[kind].push(...fresh);
      }
      plan.entries.push(e);
    }
  }
  return plan;
}

/**
 * A whole Claude Code settings file as the hook reads and edits it: `permissions` may be missing, `hooks`
 * is where `capsule hook claude --install` writes, and every other key is kept as it is and ignored.
 */
export const claudeSettingsDocumentSchema = z.looseObject({
  permissions: claudeSettingsSchema.shape.permissions.optional(),
  hooks: z
    .record(z.string(), z.unknown())
    .optional()
    .describe('Hooks by event name; `capsule hook claude --install` adds one under PreToolUse.'),
});

export type ClaudeSettingsDocument = z.infer<typeof claudeSettingsDocumentSchema>;

/**
 * Where a Claude Code settings file lives, and so who stands behind it: `user` is the person's own
 * (`~/.claude/settings.json`, outside every repository); `project` (`.claude/settings.json`) and
 * `local` (`.claude/settings.local.json`) lie in the project folder, which a repository brings.
 */
export type ClaudeSettingsScope = 'user' | 'project' | 'local';

/** The Claude Code settings files of a project and a person, in Claude Code's own order. */
export function claudeSettingsFiles(
  projectRoot: string,
  home: string,
): Array<{ scope: ClaudeSettingsScope; file: string }> {
  return [
    { scope: 'user', file: path.join(home, '.claude', 'settings.json') },
    { scope: 'project', file: path.join(projectRoot, '.claude', 'settings.json') },
    { scope: 'local', file: path.join(projectRoot, '.claude', 'settings.local.json') },
  ];
}

/**
 * Read one whole settings file (claudeSettingsDocumentSchema). A file that does not exist is undefined;
 * one unreadable, not JSON or of the wrong shape is an error naming the file and the field.
 */
export async function readClaudeSettingsDocument(
  file: string,
): Promise<{ settings: ClaudeSettingsDocument; text: string } | undefined> {
  const text = await readOptionalFile(file, 'utf8', cannotRead(file, { file }));
  if (text === undefined) return undefined;
  const doc = text.trim() === '' ? {} : settingsJson(text, { file });
  const parsed = claudeSettingsDocumentSchema.safeParse(doc);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue === undefined ? '' : issue.path.join('.');
    throw new CapsuleError(
      'USAGE',
      `${file}: ${at === '' ? 'the document' : at} is not valid Claude Code settings: ${issue?.message ?? parsed.error.message}`,
      {
        file,
        field: at === '' ? undefined : at,
        hint: 'Expected {"permissions":{"allow":["Bash(git diff:*)"],"deny":[...]}}.',
      },
    );
  }
  return { settings: parsed.data, text };
}
