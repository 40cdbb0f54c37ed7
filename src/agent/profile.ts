import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { packageRoot } from '../base/package-root.js';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { z } from 'zod';
import { PERMISSION_MODES, type PermissionMode } from '../project/project-config.js';
import { CapsuleError } from '../base/errors.js';
import { zodIssues } from '../base/zod-issues.js';
import type { Trust } from '../permissions/ceiling.js';
import { parseRule } from '../permissions/rules.js';
import { PROFILES_DIR } from '../project/protected-state.js';
import { isToolName, TOOL_NAMES, type ToolName } from '../tools/catalog.js';

/** An agent profile (docs/mcp.md, "Profiles"): front matter validated, body kept as the system prompt. */
export interface AgentProfile {
  name: string;
  description: string;
  /** Tools the profile exposes; everything else is hidden from tools/list and refused. */
  tools: ToolName[];
  /** Mode the gate is reset to when the profile is selected. */
  mode: PermissionMode;
  allow: string[];
  deny: string[];
  /** A read-only sub-agent profile: sessions using it are children (depth 1, None tools only). */
  subagent: boolean;
  /** The Markdown body after the front matter (system prompt for the agent). */
  prompt: string;
  /** Where it was read from: `builtin:<file>` or the absolute path of a project profile. */
  source: string;
  /**
   * `process` for the built-in profiles shipped with capsule; `persistent` for a project profile
   * (`.capsule/profiles/`), whose allow rules and bypass/edit mode then apply to sandboxed calls only.
   */
  trust: Trust;
}

const ruleList = (what: string) =>
  z
    .array(z.string().min(1))
    .default([])
    .describe(`${what} rules, Tool or Tool(glob), e.g. run_command(git *).`);

/** Front matter schema. Unknown keys are ignored (stripped) so later fields stay compatible. */
export const profileFrontMatterSchema = z
  .object({
    name: z
      .string()
      .regex(/^[a-z][a-z0-9_-]{0,63}$/, 'must be 1-64 chars of a-z, 0-9, "-" or "_", starting with a letter')
      .describe('Profile name, used by --profile NAME.'),
    description: z.string().min(1).max(2000).describe('What the profile is for.'),
    tools: z
      .union([z.literal('*'), z.array(z.string()).min(1)], {
        error: (issue) =>
          issue.input === undefined
            ? 'is required: a list of tool names, or "*"'
            : 'must be a list of tool names, or "*"',
      })
      .describe('Tool allowlist: tool names, or "*" for every tool. Tools outside it are hidden.'),
    mode: z
      .enum(PERMISSION_MODES)
      .default('default')
      .describe('Mode the gate is reset to: default | plan | edit | bypass.'),
    allow: ruleList('Allow'),
    deny: ruleList('Deny'),
    subagent: z
      .boolean()
      .default(false)
      .describe('True for a read-only sub-agent profile (only None tools, depth 1).'),
  })
  .describe('Agent profile front matter (YAML between --- lines at the top of a Markdown file).');

function invalid(
  file: string,
  field: string | undefined,
  message: string,
  hint?: string,
  cause?: unknown,
): CapsuleError {
  return new CapsuleError(
    'PROFILE_INVALID',
    `${file}: ${field !== undefined ? `${field} ` : ''}${message}`,
    { file, field, hint: hint ?? 'See docs/mcp.md ("Profiles") for the format.' },
    cause === undefined ? undefined : { cause },
  );
}

/** The key a DUPLICATE_KEY error points at: the text from there to the `:` on its line, unquoted. */
function repeatedYamlKey(yaml: string, at: number): string | undefined {
  const rest = yaml.slice(at).split('\n')[0] ?? '';
  const key = rest
    .replace(/^\?\s*/, '')
    .split(':')[0]
    ?.trim()
    .replace(/^(["'])(.*)\1$/, '$2');
  return key === undefined || key === '' ? undefined : key;
}

/**
 * Pure: one profile file's text → a validated profile, or PROFILE_INVALID naming the file and field.
 * `trust` defaults to `persistent`: only the catalog, reading capsule's own folder, says `process`.
 */
export function parseProfile(text: string, file: string, trust: Trust = 'persistent'): AgentProfile {
  const m = /^---\r?\n([\s\S]*?)\r?\n---[ \t]*(?:\r?\n|$)([\s\S]*)$/.exec(text.replace(/^\uFEFF/, ''));
  if (m === null) {
    throw invalid(
      file,
      undefined,
      'has no YAML front matter: it must start with a line "---", the fields, and "---".',
    );
  }
  let raw: unknown;
  const yaml = m[1] ?? '';
  try {
    // uniqueKeys is the yaml package's default; it is spelled out because a repeated key (`deny:` twice,
    // the last one empty) must never silently win in a file that carries policy.
    raw = parseYaml(yaml, { uniqueKeys: true });
  } catch (err) {
    if (err instanceof YAMLParseError && err.code === 'DUPLICATE_KEY') {
      const key = repeatedYamlKey(yaml, err.pos[0]);
      const where = err.linePos?.[0] !== undefined ? ` (front matter line ${err.linePos[0].line})` : '';
      throw invalid(
        file,
        key,
        `appears twice in the front matter${where}: YAML keeps only one of them; remove the duplicate.`,
      );
    }
    throw invalid(
      file,
      undefined,
      `front matter is not valid YAML: ${(err as Error).message.split('\n')[0]}`,
    );
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw invalid(file, undefined, 'front matter must be a YAML mapping (key: value lines).');
  }
  const parsed = profileFrontMatterSchema.safeParse(raw);
  if (!parsed.success) {
    const first = zodIssues(parsed.error, raw)[0];
    let message = first?.message ?? 'is invalid';
    if (first?.field === 'mode') message = `must be one of ${PERMISSION_MODES.join(', ')}`;
    throw invalid(file, first?.field, message);
  }
  const fm = parsed.data;
  let tools: ToolName[];
  if (fm.tools === '*') tools = [...TOOL_NAMES];
  else {
    tools = [];
    for (const [i, name] of fm.tools.entries()) {
      if (!isToolName(name)) {
        throw invalid(
          file,
          `tools[${i}]`,
          `"${name}" is not a capsule tool.`,
          `Known tools: ${TOOL_NAMES.join(', ')}.`,
        );
      }
      if (!tools.includes(name)) tools.push(name);
    }
  }
  for (const [list, rules] of [
    ['allow', fm.allow],
    ['deny', fm.deny],
  ] as const) {
    for (const [i, rule] of rules.entries()) {
      try {
        parseRule(rule, `profile:${fm.name}`, 'persistent', list);
      } catch (err) {
        throw invalid(file, `${list}[${i}]`, (err as Error).message, undefined, err);
      }
    }
  }
  return {
    name: fm.name,
    description: fm.description,
    tools,
    mode: fm.mode,
    allow: fm.allow,
    deny: fm.deny,
    subagent: fm.subagent,
    prompt: (m[2] ?? '').trim(),
    source: file,
    trust,
  };
}

/** The built-in profiles folder of this package (`profiles/` at the package root, beside dist/). */
export function builtinProfilesDir(): string {
  return path.join(packageRoot(), 'profiles');
}

export interface ProfileCatalogOptions {
  projectRoot: string;
  /** Default: builtinProfilesDir(). */
  builtinDir?: string | undefined;
  /**
   * The project profiles to load (file name → text) instead of reading `.capsule/profiles/`: profiles
   * are policy, so a session loads the ones a person confirmed, as confirmed. Default: the folder.
   */
  projectProfiles?: Readonly<Record<string, string>> | undefined;
}

interface Entry {
  profile?: AgentProfile;
  error?: CapsuleError;
  file: string;
}

/**
 * Built-in profiles plus the project's own (`.capsule/profiles/*.md`, a folder only the human edits:
 * capsule's self-protection refuses tool writes there). A project profile replaces a built-in one
 * of the same name. A broken file is reported when it is selected, not at load.
 */
export class ProfileCatalog {
  private constructor(private readonly entries: Map<string, Entry>) {}

  static async load(options: ProfileCatalogOptions): Promise<ProfileCatalog> {
    const entries = new Map<string, Entry>();
    const builtinDir = options.builtinDir ?? builtinProfilesDir();
    await readFolder(builtinDir, entries, 'process', (f) => `builtin:${f}`);
    // A project profile may replace a built-in of the same name, but it stays a project file.
    const projectDir = path.join(options.projectRoot, PROFILES_DIR);
    if (options.projectProfiles === undefined)
      await readFolder(projectDir, entries, 'persistent', (f, abs) => abs);
    else {
      for (const [f, text] of Object.entries(options.projectProfiles).sort(([a], [b]) => (a < b ? -1 : 1))) {
        if (f.endsWith('.md')) addProfile(entries, text, path.join(projectDir, f), f, 'persistent');
      }
    }
    return new ProfileCatalog(entries);
  }

  names(): string[] {
    return [...this.entries.keys()].sort();
  }

  get(name: string): AgentProfile {
    const entry = this.entries.get(name);
    if (entry === undefined) {
      throw new CapsuleError('NOT_FOUND', `No profile named "${name}".`, {
        hint: `Available: ${this.names().join(', ')}. Project profiles live in ${PROFILES_DIR}/NAME.md.`,
      });
    }
    if (entry.error !== undefined) throw entry.error;
    return entry.profile as AgentProfile;
  }
}

async function readFolder(
  dir: string,
  entries: Map<string, Entry>,
  trust: Trust,
  label: (file: string, abs: string) => string,
): Promise<void> {
  let files: string[];
  try {
    files = (await readdir(dir)).filter((f) => f.endsWith('.md')).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // no such folder: nothing to add
    // There but unreadable is an error, never "no profiles": its rules would silently not apply.
    const why = `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
    throw invalid(dir, undefined, why, 'Make it a readable folder of .md profiles, or remove it.', err);
  }
  for (const f of files) {
    const abs = path.join(dir, f);
    const shown = label(f, abs);
    let text: string;
    try {
      text = await readFile(abs, 'utf8');
    } catch (err) {
      const error = invalid(shown, undefined, `cannot be read: ${(err as Error).message}`, undefined, err);
      entries.set(f.slice(0, -3), { error, file: shown });
      continue;
    }
    addProfile(entries, text, shown, f, trust);
  }
}

function addProfile(entries: Map<string, Entry>, text: string, shown: string, f: string, trust: Trust): void {
  // Keyed by file name until parsed, so a broken file can still be reported by the name it would have.
  const fallbackName = f.slice(0, -3);
  try {
    const profile = parseProfile(text, shown, trust);
    entries.set(profile.name, { profile, file: shown });
  } catch (err) {
    const error =
      err instanceof CapsuleError
        ? err
        : invalid(shown, undefined, `cannot be read: ${(err as Error).message}`);
    entries.set(fallbackName, { error, file: shown });
  }
}
