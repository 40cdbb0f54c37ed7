// `capsule hook claude`'s work, loaded only when the command runs (see hook.ts).
import { realpath } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import {
  claudeSettingsFiles,
  mapClaudeRule,
  readClaudeSettingsDocument,
  type ClaudeSettingsScope,
} from '../../permissions/claude-settings.js';
import { CapsuleError, isCapsuleError } from '../../base/errors.js';
import { parseJsonText } from '../../base/json-text.js';
import { isInside } from '../../manifest/paths.js';
import type { CommandParser } from '../../permissions/commands/parser.js';
import type { Explanation, PermissionEngine } from '../../permissions/engine.js';
import { matchPathGlob } from '../../base/glob.js';
import { makeKey, RUN_COMMAND, WRITE_FILE } from '../../permissions/keys.js';
import { promptSafe } from '../../permissions/prompter.js';
import type { RuleSource } from '../../permissions/rules.js';
import type { PermissionRequest } from '../../permissions/types.js';
import type { HookPlace } from '../../runtime/hook-gate.js';
import { shellWord } from '../../base/shell-quote.js';
import { EXIT } from '../exit-codes.js';
import { write, type CliIO } from '../output.js';

/** What `capsule hook claude` answers: Claude Code's decisions, or none (its own rules apply). */
export type HookDecision = 'allow' | 'deny' | 'ask' | 'none';

export interface HookAnswer {
  decision: HookDecision;
  /** Shown to the person (ask) or to the agent (deny); escaped and capped. */
  reason: string;
  /** The capsule key judged (`run_command:git`, `write_file:src/a.ts`, `claude:WebFetch` …). */
  key: string;
  /** What decided, for the audit log. */
  source: string;
  matched?: string | undefined;
  /** --confine: the Bash input to run instead (the same command, through capsule exec). */
  updatedInput?: Record<string, unknown> | undefined;
}

export interface HookOptions {
  confine?: boolean;
}

/** Envelopes carry Write contents: past this, the envelope is refused rather than read on. */
const MAX_ENVELOPE_BYTES = 16 * 1024 * 1024;
/** A reason longer than this is cut (Claude Code shows it to the person or the agent). */
const REASON_MAX_CHARS = 600;
/** A one-use grant of --confine waits this long for Claude Code (and a person) to run it. */
const CONFINE_GRANT_TTL_MS = 10 * 60_000;
/** Claude Code's own Bash default timeout, used when the call names none. */
const BASH_DEFAULT_TIMEOUT_MS = 120_000;

/** The PreToolUse envelope Claude Code writes on the hook's stdin (unknown keys are kept and ignored). */
export const preToolUseEnvelopeSchema = z.looseObject({
  hook_event_name: z.literal('PreToolUse').describe('The event: only PreToolUse is judged.'),
  tool_name: z.string().min(1).max(512).describe('Bash, Read, Edit, Write, mcp__server__tool …'),
  tool_input: z.record(z.string(), z.unknown()).describe("The tool's arguments."),
  tool_use_id: z.string().optional().describe('The id of the tool call.'),
  session_id: z.string().optional().describe("Claude Code's session id."),
  transcript_path: z.string().optional().describe("The session's transcript file."),
  cwd: z.string().min(1).describe('The working directory of the session (absolute).'),
  permission_mode: z.string().optional().describe("Claude Code's permission mode."),
});

export type PreToolUseEnvelope = z.infer<typeof preToolUseEnvelopeSchema>;

const bashInputSchema = z.looseObject({
  command: z.string().describe('The command Claude Code runs with bash.'),
  timeout: z.number().positive().optional().describe('Milliseconds before Claude Code stops it.'),
});

/** Claude Code's file tools and the argument naming their path; `write`: it changes the file. */
const FILE_TOOLS: Readonly<Record<string, { field: string; write: boolean; optional?: boolean }>> = {
  Read: { field: 'file_path', write: false },
  Edit: { field: 'file_path', write: true },
  Write: { field: 'file_path', write: true },
  MultiEdit: { field: 'file_path', write: true },
  NotebookEdit: { field: 'notebook_path', write: true },
  Glob: { field: 'path', write: false, optional: true },
  Grep: { field: 'path', write: false, optional: true },
  LS: { field: 'path', write: false },
};

/** The project's Claude Code settings files, relative to the root (lower case: case-insensitive file systems). */
const CLAUDE_SETTINGS_FILES = new Set(['.claude/settings.json', '.claude/settings.local.json']);

const safe = (text: string): string => promptSafe(text, REASON_MAX_CHARS);

/** The JSON Claude Code reads from a PreToolUse hook; undefined for no decision (print nothing). */
export function hookOutput(answer: HookAnswer): string | undefined {
  if (answer.decision === 'none') return undefined;
  return `${JSON.stringify({
    hookSpecificOutput: {
      hookEventName: 'PreToolUse',
      permissionDecision: answer.decision,
      permissionDecisionReason: answer.reason,
      ...(answer.updatedInput !== undefined ? { updatedInput: answer.updatedInput } : {}),
    },
  })}\n`;
}

async function readAll(io: CliIO): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of io.stdin() as AsyncIterable<Buffer | string>) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    size += buf.length;
    if (size > MAX_ENVELOPE_BYTES)
      throw new CapsuleError('USAGE', `the envelope passes ${MAX_ENVELOPE_BYTES} bytes`, { field: 'stdin' });
    chunks.push(buf);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The folder Claude Code started in: $CLAUDE_PROJECT_DIR when it is absolute, else this process's cwd. */
function claudeProjectDir(io: CliIO): string {
  const dir = io.env.CLAUDE_PROJECT_DIR;
  return dir !== undefined && path.isAbsolute(dir) ? dir : io.cwd;
}

/** Parse the envelope, or say exactly what is wrong with it. */
export function parseEnvelope(text: string): PreToolUseEnvelope {
  const doc = parseJsonText(
    text,
    (reason, cause) =>
      new CapsuleError('USAGE', `the hook input is not JSON (${reason})`, { field: 'stdin' }, cause),
  );
  const parsed = preToolUseEnvelopeSchema.safeParse(doc);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue?.path.join('.') || 'the envelope';
    throw new CapsuleError(
      'USAGE',
      `the hook input is not a PreToolUse envelope: ${at}: ${issue?.message ?? 'invalid'}`,
      {
        field: at,
      },
    );
  }
  if (!path.isAbsolute(parsed.data.cwd))
    throw new CapsuleError('USAGE', 'the hook input is not a PreToolUse envelope: cwd is not absolute', {
      field: 'cwd',
    });
  return parsed.data;
}

interface HookContext {
  opts: HookOptions;
  runtime: HookPlace;
  parser: CommandParser | undefined;
  engine: PermissionEngine;
  /** Allow rules of the person's own Claude Code settings for Read/Edit outside the project (`//abs/**`). */
  outsideReads: string[];
  outsideEdits: string[];
}

/**
 * Claude Code's settings as capsule rule sources. Deny rules count from every file. Allow rules are a
 * person's only in the user's own settings (~/.claude/settings.json, outside every repository): those
 * are `process` trust; the project's files (.claude/settings.json, settings.local.json) lie in the
 * checkout a repository brings, so their allows are `persistent` and, by the ceiling, never let host
 * code run.
 */
async function claudeRuleSources(
  judgesCommands: boolean,
  root: string,
  home: string,
): Promise<{ sources: RuleSource[]; reads: string[]; edits: string[] }> {
  const sources: RuleSource[] = [];
  const reads: string[] = [];
  const edits: string[] = [];
  for (const { scope, file } of claudeSettingsFiles(root, home)) {
    const read = await readClaudeSettingsDocument(file);
    const permissions = read?.settings.permissions;
    if (permissions === undefined) continue;
    const origin = `claude ${scope} settings (${file})`;
    const allow: string[] = [];
    const deny: string[] = [];
    for (const kind of ['allow', 'deny'] as const) {
      for (const text of permissions[kind]) {
        if (kind === 'allow' && scope === 'user') {
          const outside = /^(Read|Edit|Write|MultiEdit|NotebookEdit)\((\/\/|~\/)([\s\S]+)\)$/.exec(
            text.trim(),
          );
          if (outside !== null) {
            const base = outside[2] === '//' ? '' : `${home.replace(/^\/+/, '')}/`;
            (outside[1] === 'Read' ? reads : edits).push(`${base}${outside[3] as string}`);
          }
        }
        // The mapping `capsule rules import` writes into capsule.json, read live here. A rule that can
        // never match in capsule, or has no counterpart, decides nothing (`capsule rules check` says so).
        const e = mapClaudeRule(kind, text, { projectRoot: root, settingsFile: file, home });
        const usable =
          kind === 'deny' ? e.outcome === 'import' : e.outcome === 'import' || e.outcome === 'left-out';
        // A file tool's call loads no bash parser: its command rules cannot matter to it.
        const rules = e.rules.filter((r) => judgesCommands || !r.startsWith(RUN_COMMAND));
        if (usable) (kind === 'allow' ? allow : deny).push(...rules);
      }
    }
    // Allows are a person's only from the user's own file; a project file's are `persistent` (ceiling).
    sources.push({ origin, trust: trustOf(scope), allow: scope === 'user' ? allow : [], deny });
  }
  return { sources, reads, edits };
}

function trustOf(scope: ClaudeSettingsScope): 'process' | 'persistent' {
  return scope === 'user' ? 'process' : 'persistent';
}

/**
 * Does the command run capsule (by name, or this very CLI's entry file through node)? capsule runs its
 * arguments, and a grant on its command line is the caller's word: such a command is always asked.
 */
function runsCapsule(parser: CommandParser, command: string, cwd: string): boolean {
  const facts = parser.analyze(command).facts;
  const entry = process.argv[1] === undefined ? undefined : path.resolve(process.argv[1]);
  const words = [
    ...[...facts.commands, ...(facts.possible ?? [])].flatMap((c) => [c.name, ...c.args]),
    ...(facts.opaque ?? []).flatMap((o) => [o.via, ...o.args]),
  ].filter((w): w is string => w !== null);
  const isCapsule = (w: string): boolean =>
    path.basename(w) === 'capsule' ||
    /^capsule\s/.test(w) ||
    (entry !== undefined && path.resolve(cwd, w) === entry);
  return words.some(isCapsule) || /\bCAPSULE_[A-Z_]*=/.test(command);
}

async function judgeBash(ctx: HookContext, envelope: PreToolUseEnvelope): Promise<HookAnswer> {
  const input = bashInputSchema.safeParse(envelope.tool_input);
  if (!input.success)
    return deny(
      'claude:Bash',
      'envelope',
      'capsule: tool_input.command is missing or not a string; refused.',
    );
  const command = input.data.command;
  if (command.trim() === '')
    return deny('run_command:', 'envelope', 'capsule: the command is empty; refused.');
  const parser = ctx.parser as CommandParser;
  const root = ctx.runtime.root;
  const cwd = await realpath(envelope.cwd).catch(() => path.resolve(envelope.cwd));
  const { commandRequest } = await import('../../permissions/commands/permission.js');
  const request = commandRequest(parser, command, isInside(root, cwd) ? cwd : root);
  const key = request.key.raw;
  const ex = ctx.engine.explain(request);
  const refused = refusal(key, ex);
  if (refused !== undefined) return refused;
  let asked: string | undefined;
  if (ex.outcome === 'ask' && ex.unproven !== undefined) asked = ex.reason;
  else if (request.key.compound) {
    const reasons = parser.analyze(command).reasons.join('; ');
    asked = `${key} is a compound command (${reasons}): a rule for one program never covers it; approve this exact command.`;
  } else if (runsCapsule(parser, command, cwd))
    asked =
      'The command runs capsule, which runs its arguments: a grant written on its command line is the caller’s word, not the person’s.';
  if (asked !== undefined) {
    const answer: HookAnswer = { decision: 'ask', key, source: 'ask', reason: safe(`capsule: ${asked}`) };
    // What may break a deny rule is a person's call at capsule's own prompt: it is not rewritten.
    if (ctx.opts.confine === true && ex.unproven === undefined)
      return confine(ctx, envelope, command, answer);
    return answer;
  }
  // Simple, and no objection: a person's own allow (user settings) lets it run; else Claude Code decides.
  const allowed = ex.outcome === 'allow';
  if (ctx.opts.confine !== true) {
    return {
      decision: 'none',
      key,
      source: allowed ? ex.source : 'none',
      matched: ex.matched,
      reason: allowed ? ex.reason : `${key}: capsule has no objection; Claude Code's own rules decide.`,
    };
  }
  return confine(ctx, envelope, command, {
    decision: allowed ? 'allow' : 'ask',
    key,
    source: allowed ? ex.source : 'ask',
    matched: ex.matched,
    reason: safe(
      allowed
        ? `capsule: ${ex.reason} It runs confined (capsule exec).`
        : `capsule: ${key} runs confined through capsule exec once you approve it.`,
    ),
  });
}

/**
 * --confine: the same command, run by `capsule exec` with a one-use grant for exactly its key, minted
 * here into capsule's per-user state (which the confined command cannot see) and passed by id.
 */
async function confine(
  ctx: HookContext,
  envelope: PreToolUseEnvelope,
  command: string,
  answer: HookAnswer,
): Promise<HookAnswer> {
  const [{ openOneUseGrants }, { commandPermission }, { RUN_COMMAND_MAX_TIMEOUT_MS }] = await Promise.all([
    import('../../runtime/state.js'),
    import('../../permissions/commands/permission.js'),
    import('../../tools/run-command.js'),
  ]);
  const root = ctx.runtime.root;
  const cwd = await realpath(envelope.cwd).catch(() => path.resolve(envelope.cwd));
  // capsule exec runs in the project root: a command of a sub-folder goes there first, as run_command does.
  const inner = cwd === root ? command : `cd -- ${shellWord(cwd)}\n${command}`;
  const key = commandPermission(ctx.parser as CommandParser, inner, root).permission;
  if (key.type !== 'ask') throw new Error('unreachable: commands always ask');
  const store = openOneUseGrants(ctx.runtime.stateDir, ctx.runtime.stateKey);
  const id = await store.mint({
    key: key.key.raw,
    projectRoot: root,
    ttlMs: CONFINE_GRANT_TTL_MS,
    origin: 'capsule hook claude --confine',
  });
  const bash = bashInputSchema.parse(envelope.tool_input);
  const timeoutMs = Math.min(Math.ceil(bash.timeout ?? BASH_DEFAULT_TIMEOUT_MS), RUN_COMMAND_MAX_TIMEOUT_MS);
  const main = process.argv[1] ?? 'capsule';
  // A subshell: Claude Code's Bash keeps its working directory from call to call, and this cd is capsule's.
  const rewritten =
    `(cd -- ${shellWord(root)} && exec ${shellWord(process.execPath)} ${shellWord(main)} exec ` +
    `--grant-id ${id} --timeout-ms ${timeoutMs} -- ${shellWord(inner)})`;
  return { ...answer, updatedInput: { ...envelope.tool_input, command: rewritten } };
}

async function judgeFile(ctx: HookContext, envelope: PreToolUseEnvelope): Promise<HookAnswer> {
  const spec = FILE_TOOLS[envelope.tool_name] as { field: string; write: boolean; optional?: boolean };
  const tool = spec.write ? WRITE_FILE : 'read_file';
  const given = envelope.tool_input[spec.field];
  if (given === undefined && spec.optional !== true)
    return deny(
      `claude:${envelope.tool_name}`,
      'envelope',
      `capsule: tool_input.${spec.field} is missing; refused.`,
    );
  if (given !== undefined && (typeof given !== 'string' || given === ''))
    return deny(
      `claude:${envelope.tool_name}`,
      'envelope',
      `capsule: tool_input.${spec.field} is not a path; refused.`,
    );
  const target = path.resolve(envelope.cwd, given ?? '.');
  const { Workspace } = await import('../../tools/workspace.js');
  const { findProtectedState } = await import('../../project/protected-state.js');
  const runtime = ctx.runtime;
  const workspace = await Workspace.open({
    projectRoot: runtime.root,
    alsoProtected: [runtime.cacheDir],
    alsoHidden: [runtime.stateDir],
  });
  const also = [runtime.cacheDir, runtime.stateDir];
  let relative: string;
  try {
    const resolved = await workspace.resolve(target, spec.field);
    // Never capsule's own state, read or written; a folder holding it may be read (a search of the root).
    await workspace.assertWritable(resolved.real, spec.field, target, { containing: spec.write });
    relative = resolved.relative;
  } catch (err) {
    if (!isCapsuleError(err, 'PATH_ESCAPE')) throw err;
    const key = makeKey(tool, target).raw;
    const outside = await realpath(target).catch(() => target);
    const allowedBy = (spec.write ? ctx.outsideEdits : ctx.outsideReads).find((g) =>
      matchPathGlob(g, outside.replace(/^\/+/, '')),
    );
    const hit = await findProtectedState(runtime.root, outside, { also, containing: spec.write });
    if (
      allowedBy === undefined ||
      hit !== undefined ||
      !path.isAbsolute(outside) ||
      isInside(runtime.root, outside)
    )
      return { decision: 'deny', key, source: 'self-protection', reason: safe(`capsule: ${err.message}`) };
    return {
      decision: 'none',
      key,
      source: 'allow-rule',
      matched: allowedBy,
      reason: `${key}: outside the project, allowed by the user settings rule for /${allowedBy}; Claude Code's own rules decide.`,
    };
  }
  const key = makeKey(tool, relative).raw;
  if (!spec.write)
    return { decision: 'none', key, source: 'mode', reason: `${key}: read-only, inside the project.` };
  // Claude Code's settings hold this very hook: an agent that rewrites them switches its judge off.
  if (CLAUDE_SETTINGS_FILES.has(relative.toLowerCase()))
    return deny(
      key,
      'self-protection',
      `capsule: ${relative} holds Claude Code's hooks and permissions, capsule's own among them: a person edits it (capsule hook claude --install/--uninstall, or by hand).`,
    );
  const request: PermissionRequest = {
    tool: WRITE_FILE,
    kind: 'FILE_EDIT',
    key: makeKey(WRITE_FILE, relative),
    subject: relative,
    sandboxed: false,
    isolation: 'writes a file on the host, inside the project root',
  };
  const ex = ctx.engine.explain(request);
  const refused = refusal(key, ex);
  if (refused !== undefined) return refused;
  return {
    decision: 'none',
    key,
    source: 'none',
    reason: `${key}: capsule has no objection; Claude Code's own rules decide.`,
  };
}

/** The engine's deny (or error) as the hook's answer, naming the rule that decided. */
function refusal(key: string, ex: Explanation): HookAnswer | undefined {
  if (ex.outcome !== 'deny' && ex.outcome !== 'error') return undefined;
  return {
    decision: 'deny',
    key,
    source: ex.source,
    matched: ex.matched,
    reason: safe(`capsule: ${ex.reason}`),
  };
}

function deny(key: string, source: string, reason: string): HookAnswer {
  return { decision: 'deny', key, source, reason: safe(reason) };
}

/** Judge one envelope. Never throws: whatever goes wrong is a denial that says why (fail closed). */
export async function judgeEnvelope(
  io: CliIO,
  text: string,
  opts: HookOptions,
  /** Filled with the project root once known, so the answer is recorded in that project's log. */
  audit: { root?: string | undefined },
): Promise<HookAnswer> {
  let envelope: PreToolUseEnvelope;
  try {
    envelope = parseEnvelope(text);
  } catch (err) {
    return deny('claude:?', 'envelope', `capsule: ${(err as Error).message}; refused (fail closed).`);
  }
  const tool = envelope.tool_name;
  const isBash = tool === 'Bash';
  const isFile = Object.hasOwn(FILE_TOOLS, tool);
  if (tool.startsWith('mcp__capsule__'))
    return {
      decision: 'none',
      key: `claude:${tool}`,
      source: 'capsule-mcp',
      reason: `${tool} is judged by capsule's own MCP server.`,
    };
  if (!isBash && !isFile)
    return {
      decision: 'none',
      key: `claude:${tool}`,
      source: 'none',
      reason: `${tool} is not judged by capsule; Claude Code's own rules decide.`,
    };
  let parser: CommandParser | undefined;
  try {
    const { createCommandParser } = isBash
      ? await import('../../permissions/commands/parser.js')
      : { createCommandParser: undefined };
    const home = homedir();
    // The bash parser (a Wasm grammar) only for Bash: a file tool's call does not wait for it.
    parser = createCommandParser === undefined ? undefined : await createCommandParser();
    const p = parser;
    let claude = { sources: [] as RuleSource[], reads: [] as string[], edits: [] as string[] };
    const { openHookGate } = await import('../../runtime/hook-gate.js');
    const { place, engine } = await openHookGate({
      projectDir: claudeProjectDir(io),
      env: io.env,
      parser: p,
      profileRules: async (root) => {
        claude = await claudeRuleSources(p !== undefined, root, home);
        return claude.sources;
      },
    });
    audit.root = place.root;
    const ctx: HookContext = {
      opts,
      runtime: place,
      parser,
      engine,
      outsideReads: claude.reads,
      outsideEdits: claude.edits,
    };
    return isBash ? await judgeBash(ctx, envelope) : await judgeFile(ctx, envelope);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    return deny(
      `claude:${tool}`,
      'error',
      `capsule: the call cannot be judged (${why}); refused (fail closed).`,
    );
  } finally {
    parser?.close();
  }
}

/** `capsule hook claude`: one envelope on stdin, Claude Code's answer on stdout, exit 0. */
export async function hookClaude(io: CliIO, opts: HookOptions): Promise<number> {
  const audit: { root?: string | undefined } = {};
  let answer: HookAnswer;
  try {
    answer = await judgeEnvelope(io, await readAll(io), opts, audit);
  } catch (err) {
    answer = deny('claude:?', 'envelope', `capsule: ${(err as Error).message}; refused (fail closed).`);
  }
  answer = await recordAnswer(io, answer, audit.root);
  const out = hookOutput(answer);
  if (out !== undefined) await write(io.stdout, out);
  return EXIT.OK;
}

/** Every answer in the project's audit log (tool `claude-hook`); one that cannot be recorded is a denial. */
async function recordAnswer(
  io: CliIO,
  answer: HookAnswer,
  knownRoot: string | undefined,
): Promise<HookAnswer> {
  try {
    const [{ openProjectAuditLog }, { userStateDir }] = await Promise.all([
      import('../../runtime/audit.js'),
      import('../../base/user-state.js'),
    ]);
    let root = knownRoot;
    if (root === undefined) {
      const { loadProjectConfig } = await import('../../project/project-config.js');
      root = await realpath((await loadProjectConfig(await realpath(claudeProjectDir(io)))).root);
    }
    const stateDir = userStateDir(io.env, homedir());
    const log = await openProjectAuditLog({ projectRoot: root, stateDir });
    await log.append({
      tool: 'claude-hook',
      key: answer.key,
      decision: answer.decision,
      source: answer.source,
      reason: answer.reason,
      mode: 'default',
      matched: answer.matched,
      sandboxed: false,
    });
    return answer;
  } catch (err) {
    if (answer.decision === 'deny') return answer;
    const why = err instanceof Error ? err.message : String(err);
    return deny(
      answer.key,
      'audit',
      `capsule: the decision cannot be recorded in the audit log (${why}); refused.`,
    );
  }
}
