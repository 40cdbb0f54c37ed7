import path from 'node:path';
import { setAllowlistEntry, removeAllowlistEntry } from '../config/config-store.js';
import {
  normalizeAllowlist,
  PROJECT_CONFIG_FILE,
  readProjectConfigFile,
  type AllowlistEntry,
  type PermissionMode,
  type ProjectConfig,
} from '../config/project-config.js';
import { CapsuleError, isCapsuleError } from '../errors.js';
import { auditLogPath, JsonlAuditLog, type AuditEvent, type AuditSink } from './audit-log.js';
import { ceilingFor, type CeilingVerdict } from './ceiling.js';
import {
  canonicalGrantKey,
  createCommandParser,
  type CommandAnalysis,
  type CommandParser,
} from './command-parser.js';
import { GlobCache } from './glob.js';
import { parseKey, RUN_COMMAND } from './keys.js';
import { decide, indexProjectAllowlist, type PolicyState, type TraceStep, type Verdict } from './policy.js';
import type { Prompter } from './prompter.js';
import { buildRuleSet, type RuleSource } from './rules.js';
import { protectedTarget } from './self-protection.js';
import {
  SessionAllowlist,
  systemClock,
  type Clock,
  type SessionEntry,
  type SessionGrantOptions,
} from './session-allowlist.js';
import type { AskAnswer, Decision, PermissionGate, PermissionRequest } from './types.js';

export interface PermissionEngineOptions {
  /** Project root (the folder holding capsule.json, or the cwd). */
  projectRoot: string;
  /** capsule.json path; default `<projectRoot>/capsule.json`. */
  configFile?: string | undefined;
  /** The already-loaded capsule.json; read from `configFile` when omitted. */
  config?: ProjectConfig | undefined;
  /** Starting mode; default: capsule.json `mode`. */
  mode?: PermissionMode | undefined;
  /** Rules of the active profile (and other non-file sources), as plain strings. */
  profileRules?: readonly RuleSource[] | undefined;
  /** Session grants given up front (`--grant KEY`), already canonical keys. */
  sessionGrants?: readonly string[] | undefined;
  prompter: Prompter;
  /** Where decisions go; default the JSONL log at `<root>/.capsule/audit.jsonl`; false: nowhere. */
  audit?: AuditSink | false | undefined;
  clock?: Clock | undefined;
  /** Warnings that must not stop a call (a failed persist of an "always" answer). */
  logger?: ((message: string) => void) | undefined;
  /**
   * The bash parser, to find the simple commands inside a compound one when the caller did not pass
   * `request.parts` (deny rules are matched against each).
   */
  commandParser?: CommandParser | undefined;
}

/** `explain`: the decision that would be taken, why, and every step looked at. No side effects. */
export interface Explanation {
  outcome: 'allow' | 'deny' | 'ask' | 'error';
  source: string;
  reason: string;
  matched?: string | undefined;
  mode: PermissionMode;
  ceiling: CeilingVerdict;
  /** Answers a prompt would offer (for outcome ask). */
  options?: readonly AskAnswer[] | undefined;
  trace: TraceStep[];
  error?: { code: string; message: string } | undefined;
}

/** Parsed commands kept per engine (cleared when full). */
const ANALYSIS_CACHE_SIZE = 512;

/** Shell-quote a key for a copy-pasteable `--grant` hint. */
export function shellQuote(text: string): string {
  return /^[A-Za-z0-9_:./*@%+=,-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}

/**
 * The permission engine: capsule's PermissionGate. Construct with `PermissionEngine.create()`;
 * the decision itself is the pure `decide()`; this class owns the state (mode, rules, allowlists),
 * the prompter, persistence of "always this project" answers, and the audit log.
 */
export class PermissionEngine implements PermissionGate {
  readonly projectRoot: string;
  readonly configFile: string;
  readonly session: SessionAllowlist;
  private modeValue: PermissionMode;
  private fileConfig: ProjectConfig;
  private profileRules: readonly RuleSource[];
  private state: PolicyState;
  private readonly prompter: Prompter;
  private readonly audit: AuditSink | undefined;
  private readonly clock: Clock;
  private readonly logger: (message: string) => void;
  private readonly parser: CommandParser | undefined;
  private readonly analyses = new Map<string, CommandAnalysis>();
  /** One prompt at a time: a human answers questions in order. */
  private promptQueue: Promise<unknown> = Promise.resolve();

  private constructor(options: PermissionEngineOptions, config: ProjectConfig) {
    this.projectRoot = path.resolve(options.projectRoot);
    this.configFile = options.configFile ?? path.join(this.projectRoot, PROJECT_CONFIG_FILE);
    this.clock = options.clock ?? systemClock();
    this.session = new SessionAllowlist(this.clock);
    this.prompter = options.prompter;
    this.logger = options.logger ?? ((m) => process.stderr.write(`capsule: ${m}\n`));
    this.audit =
      options.audit === false
        ? undefined
        : (options.audit ?? new JsonlAuditLog(auditLogPath(this.projectRoot), this.clock));
    this.parser = options.commandParser;
    this.fileConfig = config;
    this.modeValue = options.mode ?? config.mode;
    this.profileRules = options.profileRules ?? [];
    this.state = this.buildState();
    for (const key of options.sessionGrants ?? []) {
      // One canonical form for every caller: patterns refused, a relative program resolved at the root.
      const canonical =
        this.parser !== undefined && key.startsWith(`${RUN_COMMAND}:`)
          ? canonicalGrantKey(this.parser, key, this.projectRoot)
          : key;
      this.grantSession(canonical, { origin: '--grant' });
    }
  }

  static async create(options: PermissionEngineOptions): Promise<PermissionEngine> {
    let config = options.config;
    if (config === undefined) {
      const file = options.configFile ?? path.join(path.resolve(options.projectRoot), PROJECT_CONFIG_FILE);
      config = (await readProjectConfigFile(file)).config;
    }
    // Deny rules are judged on the parsed command. Without a parser nothing can be proven and every
    // run_command deny rule matches (fail closed), so one is made when a command rule or grant exists.
    const mentions = (rules: readonly string[] | undefined): boolean =>
      (rules ?? []).some((r) => r.trim().startsWith(RUN_COMMAND));
    const profiles = options.profileRules ?? [];
    if (
      options.commandParser === undefined &&
      (mentions(config.permissions.allow) ||
        mentions(config.permissions.deny) ||
        profiles.some((p) => mentions(p.allow) || mentions(p.deny)) ||
        mentions(options.sessionGrants))
    )
      options = { ...options, commandParser: await createCommandParser() };
    return new PermissionEngine(options, config);
  }

  get mode(): PermissionMode {
    return this.modeValue;
  }

  setMode(mode: PermissionMode): void {
    this.modeValue = mode;
    this.state = { ...this.state, mode };
  }

  /** Replace the active profile's rules (selecting a profile loads its rules). */
  setProfileRules(sources: readonly RuleSource[]): void {
    this.profileRules = sources;
    this.state = this.buildState();
  }

  /** Re-read capsule.json (allowlist and rules). Not automatic: hand edits apply after reload(). */
  async reload(): Promise<void> {
    this.fileConfig = (await readProjectConfigFile(this.configFile)).config;
    this.state = this.buildState();
  }

  projectEntries(): AllowlistEntry[] {
    return normalizeAllowlist(this.fileConfig.allowlist);
  }

  /** A human-side session grant (`--grant`, the prompt). */
  grantSession(key: string, options: SessionGrantOptions = {}): SessionEntry {
    parseKey(key);
    return this.session.add(key, options);
  }

  /**
   * A human-side project grant for this request (prompt answer, CLI). The ceiling is checked here:
   * an unsandboxed key is refused with CEILING_VIOLATION. Capability grants are bound to the content hash.
   */
  async grantProject(request: PermissionRequest): Promise<void> {
    const ceiling = ceilingFor(request);
    if (ceiling.ceiling !== 'project') {
      throw new CapsuleError(
        'CEILING_VIOLATION',
        `${request.key.raw} cannot be allowed for the whole project: it is not sandboxed (${ceiling.reason}).`,
        {
          key: request.key.raw,
          file: this.configFile,
          hint: 'Allow it for this session only (--grant KEY or the prompt).',
        },
      );
    }
    const entry = {
      level: 'AlwaysThisProject' as const,
      ...(request.contentHash !== undefined ? { contentHash: request.contentHash } : {}),
      grantedAt: new Date(this.clock.now()).toISOString(),
    };
    this.fileConfig = await setAllowlistEntry(this.configFile, request.key.raw, entry);
    this.state = this.buildState();
  }

  /** Remove a project entry (`capsule grants revoke`). */
  async revokeProject(key: string): Promise<boolean> {
    const removed = await removeAllowlistEntry(this.configFile, key);
    await this.reload();
    return removed;
  }

  explain(input: PermissionRequest): Explanation {
    const request = this.withParts(input);
    const ceiling = ceilingFor(request);
    const base = { mode: this.modeValue, ceiling };
    try {
      const v = decide(this.state, request);
      return v.outcome === 'ask'
        ? { ...base, outcome: 'ask', source: 'ask', reason: v.reason, options: v.options, trace: v.trace }
        : {
            ...base,
            outcome: v.outcome,
            source: v.source,
            reason: v.reason,
            matched: v.matched,
            trace: v.trace,
          };
    } catch (err) {
      if (!isCapsuleError(err)) throw err;
      return {
        ...base,
        outcome: 'error',
        source: 'project-allowlist',
        reason: err.message,
        matched: err.details.key,
        trace: [],
        error: { code: err.code, message: err.message },
      };
    }
  }

  async check(input: PermissionRequest, signal?: AbortSignal): Promise<Decision> {
    const request = this.withParts(input);
    const verdict = await this.decideAndAudit(request);
    if (verdict.outcome !== 'ask') return this.finish(request, verdict);
    // Prompts are serialized; the state is looked at again once it is our turn (an earlier answer
    // may have granted the same key for the session meanwhile).
    const turn = this.promptQueue.then(() => this.askHuman(request, signal));
    this.promptQueue = turn.catch(() => undefined);
    return turn;
  }

  private async askHuman(request: PermissionRequest, signal?: AbortSignal): Promise<Decision> {
    const verdict = await this.decideAndAudit(request);
    if (verdict.outcome !== 'ask') return this.finish(request, verdict);
    const key = request.key.raw;
    const answer: AskAnswer =
      signal?.aborted === true
        ? 'Deny'
        : await this.prompter.ask(
            { request, key, options: verdict.options, ceiling: verdict.ceiling, note: verdict.note },
            signal,
          );
    if (!verdict.options.includes(answer)) {
      const err = new CapsuleError(
        'CEILING_VIOLATION',
        `${key} cannot be allowed for the whole project: it is not sandboxed (${verdict.ceiling.reason}).`,
        { key, file: this.configFile, hint: 'Answer "this session" instead.' },
      );
      await this.record(request, { decision: 'error', source: 'prompt', reason: err.message, answer });
      throw err;
    }
    if (answer === 'Deny') {
      const source = this.prompter.interactive ? 'prompt' : 'no-prompt';
      const reason = this.denialMessage(request, verdict.ceiling, this.prompter.interactive);
      await this.record(request, { decision: 'deny', source, reason, answer });
      return { outcome: 'deny', source, reason, key };
    }
    let reason = `${key} allowed at the prompt (${answer}).`;
    if (answer === 'AlwaysThisSession') {
      this.session.add(key, { contentHash: request.contentHash, origin: 'prompt' });
    } else if (answer === 'AlwaysThisProject') {
      try {
        await this.grantProject(request);
      } catch (err) {
        if (isCapsuleError(err, 'CEILING_VIOLATION')) throw err;
        // seed 001: a failed persist is not fatal: log it, allow this once.
        const why = err instanceof Error ? err.message : String(err);
        this.logger(
          `could not save the project grant for ${key} in ${this.configFile}: ${why}; allowed once.`,
        );
        reason = `${key} allowed once: saving the project grant failed (${why}).`;
      }
    }
    await this.record(request, { decision: 'allow', source: 'prompt', reason, answer });
    return { outcome: 'allow', source: 'prompt', reason, key };
  }

  /** A run_command request gets what the command runs (deny rules match each program it runs). */
  private withParts(input: PermissionRequest): PermissionRequest {
    if (input.key.tool !== RUN_COMMAND) return input;
    // What a command runs is always the engine's own reading, never the caller's.
    const request: PermissionRequest = { ...input, commands: undefined };
    if (this.parser === undefined) return request;
    let analysis = this.analyses.get(request.subject);
    if (analysis === undefined) {
      analysis = this.parser.analyze(request.subject);
      // Agents repeat commands: a small cache keeps a repeated decision from parsing again.
      if (this.analyses.size >= ANALYSIS_CACHE_SIZE) this.analyses.clear();
      this.analyses.set(request.subject, analysis);
    }
    const facts = { ...request, parts: request.parts ?? analysis.parts, commands: analysis.facts };
    // A relative program run outside the project root is another file than a rule's `./x` means: its
    // subject names the resolved path, so no rule written for the root's file allows it.
    const program = analysis.program;
    if (request.key.compound || program === undefined || !program.includes('/') || program.startsWith('/'))
      return facts;
    if (path.resolve(this.projectRoot, program) === request.key.action) return facts;
    return { ...facts, subject: `${request.key.action}${request.subject.slice(program.length)}` };
  }

  /** decide(), with a ceiling violation recorded in the audit log before it is thrown. */
  private async decideAndAudit(request: PermissionRequest): Promise<Verdict> {
    try {
      return decide(this.state, request);
    } catch (err) {
      if (isCapsuleError(err)) {
        await this.record(request, {
          decision: 'error',
          source: 'project-allowlist',
          reason: err.message,
          matched: err.details.key,
        });
      }
      throw err;
    }
  }

  private async finish(
    request: PermissionRequest,
    verdict: Exclude<Verdict, { outcome: 'ask' }>,
  ): Promise<Decision> {
    if (verdict.sessionEntry !== undefined) this.session.consume(verdict.sessionEntry);
    await this.record(request, {
      decision: verdict.outcome,
      source: verdict.source,
      reason: verdict.reason,
      matched: verdict.matched,
    });
    return {
      outcome: verdict.outcome,
      source: verdict.source,
      reason: verdict.reason,
      key: request.key.raw,
      matched: verdict.matched,
    };
  }

  private async record(
    request: PermissionRequest,
    event: Pick<AuditEvent, 'decision' | 'source' | 'reason'> &
      Partial<Pick<AuditEvent, 'matched' | 'answer'>>,
  ): Promise<void> {
    if (this.audit === undefined) return;
    await this.audit.append({
      tool: request.tool,
      key: request.key.raw,
      mode: this.modeValue,
      contentHash: request.contentHash,
      sandboxed: request.sandboxed,
      ...event,
    });
  }

  /** The denial text: names the key and says exactly how to allow it. */
  denialMessage(request: PermissionRequest, ceiling: CeilingVerdict, asked: boolean): string {
    const key = request.key.raw;
    const head = asked
      ? `Permission denied: ${key} was refused at the prompt.`
      : `Permission denied: ${key} needs approval and no one can be asked (--no-prompt, or no terminal).`;
    const grant = `run again with --grant ${shellQuote(key)} (this process only)`;
    if (ceiling.ceiling === 'project') {
      const entry = JSON.stringify({
        [key]:
          request.contentHash !== undefined
            ? { level: 'AlwaysThisProject', contentHash: request.contentHash }
            : 'AlwaysThisProject',
      });
      return `${head} To allow it, ${grant}, or add ${entry.slice(1, -1)} to "allowlist" in ${this.configFile}.`;
    }
    const compound = request.key.compound
      ? ' It is a compound command: only this exact command is covered.'
      : '';
    return `${head} To allow it, ${grant}; it is not sandboxed (${ceiling.reason}), so capsule.json cannot allow it for the project.${compound}`;
  }

  private buildState(): PolicyState {
    const rules = buildRuleSet([
      { origin: PROJECT_CONFIG_FILE, ...this.fileConfig.permissions },
      ...this.profileRules,
    ]);
    const root = this.projectRoot;
    return {
      mode: this.modeValue,
      rules,
      project: indexProjectAllowlist(this.configFile, normalizeAllowlist(this.fileConfig.allowlist)),
      session: this.session,
      globs: this.state?.globs ?? new GlobCache(),
      protectedTarget: (subject) => protectedTarget(root, subject),
    };
  }
}
