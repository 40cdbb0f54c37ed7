import type { LimitedGrant } from './grant-lifetime.js';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { addPermissionRules, setAllowlistEntry, removeAllowlistEntry } from '../project/config-store.js';
import {
  normalizeAllowlist,
  PROJECT_CONFIG_FILE,
  readProjectConfigFile,
  type AllowlistEntry,
  type PermissionMode,
  type ProjectConfig,
} from '../project/project-config.js';
import { CapsuleError, isCapsuleError } from '../base/errors.js';
import type { AuditSink } from './audit/record.js';
import { type EgressRecord } from './types.js';
import { ceilingFor, type CeilingVerdict, type PolicySource } from './ceiling.js';
import { canonicalGrantKey } from './commands/permission.js';
import { createCommandParser, type CommandAnalysis, type CommandParser } from './commands/parser.js';
import { GlobCache } from '../base/glob.js';
import { parseGrant, parseKey, RUN_COMMAND } from './keys.js';
import {
  decide,
  indexProjectAllowlist,
  type PolicyState,
  type TraceStep,
  type Unproven,
  type Verdict,
} from './policy.js';
import {
  configWithPolicy,
  policyChange,
  policyViewOf,
  tightenOnly,
  readProfileHashes,
  type PolicyChange,
  type PolicyConfirmer,
  type PolicyView,
  type ProfileHashes,
} from './policy-diff.js';
import type { PolicySnapshotStore } from './policy-snapshot.js';
import type { Prompter } from './prompter.js';
import { buildRuleSet, type RuleSource } from './rules.js';
import { PROFILES_DIR, protectedStateHit } from '../project/protected-state.js';
import {
  SessionAllowlist,
  systemClock,
  type Clock,
  type SessionEntry,
  type SessionGrantOptions,
} from './session-allowlist.js';
import { denialMessage, denialOf, ignoredAllowText } from './denial-text.js';
import {
  decisionRecord,
  networkRecord,
  policyChangeRecord,
  protectedChangeRecord,
  type DecisionFields,
} from './engine-records.js';
import { applyAnswer, replyOf, withSessionDeny, type AnswerHost } from './prompt-answers.js';
import type { AskAnswer, AskReply, Decision, PermissionGate, PermissionRequest } from './types.js';

export interface PermissionEngineOptions {
  /** Project root (the folder holding capsule.json, or the cwd). */
  projectRoot: string;
  /** capsule.json path; default `<projectRoot>/capsule.json`. */
  configFile?: string | undefined;
  /** The already-loaded capsule.json; read from `configFile` when omitted. */
  config?: ProjectConfig | undefined;
  /** Starting mode; default: capsule.json `mode`. */
  mode?: PermissionMode | undefined;
  /**
   * Who set `mode`: default this process (`--mode`). A mode read from a project file (a project
   * profile's) is `persistent`, and then bypass/edit allow sandboxed calls only.
   */
  modeSource?: PolicySource | undefined;
  /**
   * Rules of the active profile and other sources, as plain strings. A source without `trust` counts as
   * a project file (`persistent`): its allow rules apply to sandboxed calls only.
   */
  profileRules?: readonly RuleSource[] | undefined;
  /** Session grants given up front (`--grant KEY`), already canonical keys. */
  sessionGrants?: readonly string[] | undefined;
  /** Session grants with a lifetime (`--grant-for LIFETIME=KEY`): canonicalized like sessionGrants. */
  limitedGrants?: readonly LimitedGrant[] | undefined;
  prompter: Prompter;
  /**
   * Where decisions go (false: nowhere). Always the caller's: the composition root opens the project's log
   * with its head in the per-user state folder (runtime/audit.ts); the gate itself opens no file for it.
   */
  audit: AuditSink | false;
  clock?: Clock | undefined;
  /** Warnings that must not stop a call (a failed persist of an "always" answer). */
  logger?: ((message: string) => void) | undefined;
  /**
   * The bash parser, to find the simple commands inside a compound one when the caller did not pass
   * `request.parts` (deny rules are matched against each).
   */
  commandParser?: CommandParser | undefined;
  /**
   * Who confirms a changed policy found by reload() (terminal prompt, MCP elicitation). Without one,
   * a changed capsule.json or profile is reported and never adopted.
   */
  confirmPolicy?: PolicyConfirmer | undefined;
  /** Where confirmed policies are recorded across processes (capsule's per-user state). */
  snapshots?: PolicySnapshotStore | undefined;
  /** Hashes of the project profiles the session loaded (the confirmed ones); default: read at create. */
  profiles?: ProfileHashes | undefined;
}

/** What reload() did with the policy on disk. */
export interface PolicyReload {
  /** The policy on disk differs from the confirmed one. */
  changed: boolean;
  /** A person confirmed the difference and it is now in effect. */
  applied: boolean;
  /** The difference, as shown to the person (escaped). */
  diff: string[];
  message: string;
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
  /** For outcome ask: the deny rule the call cannot be proven clear of (only a person may let it run, once). */
  unproven?: Unproven | undefined;
  trace: TraceStep[];
  error?: { code: string; message: string } | undefined;
}

/** Parsed commands kept per engine (cleared when full). */
const ANALYSIS_CACHE_SIZE = 512;

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
  private modeSource: PolicySource;
  /** Warnings already given about project-file allows that did not apply (each is said once). */
  private readonly warned = new Set<string>();
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
  /** Keys answered "deny for this session": denied without asking again. */
  private readonly sessionDenials = new Set<string>();
  private readonly confirmPolicy: PolicyConfirmer | undefined;
  private readonly snapshots: PolicySnapshotStore | undefined;
  /** Project profiles (file → hash) as confirmed; profile changes are policy changes too. */
  private confirmedProfiles: ProfileHashes;
  /** The last protected-files fingerprint looked at, and whether it was reported. */
  private lastFingerprint: string | undefined;
  /** What a person's answer at a prompt acts on (prompt-answers.ts). */
  private readonly answers: AnswerHost;

  private constructor(options: PermissionEngineOptions, config: ProjectConfig) {
    this.projectRoot = path.resolve(options.projectRoot);
    this.configFile = options.configFile ?? path.join(this.projectRoot, PROJECT_CONFIG_FILE);
    this.clock = options.clock ?? systemClock();
    this.session = new SessionAllowlist(this.clock);
    this.prompter = options.prompter;
    this.logger = options.logger ?? ((m) => process.stderr.write(`capsule: ${m}\n`));
    this.audit = options.audit === false ? undefined : options.audit;
    this.parser = options.commandParser;
    this.confirmPolicy = options.confirmPolicy;
    this.answers = {
      configFile: this.configFile,
      session: this.session,
      prompter: this.prompter,
      logger: (message) => this.logger(message),
      record: (request, event) => this.record(request, event),
      saveRules: (additions, by) => this.saveRules(additions, by),
      grantProject: (request) => this.grantProject(request),
      refuseForSession: (key) => void this.sessionDenials.add(key),
    };
    this.snapshots = options.snapshots;
    this.confirmedProfiles = { ...(options.profiles ?? {}) };
    this.fileConfig = config;
    this.modeValue = options.mode ?? config.mode;
    this.modeSource =
      options.mode !== undefined
        ? (options.modeSource ?? { trust: 'process', origin: '--mode' })
        : { trust: 'persistent', origin: PROJECT_CONFIG_FILE };
    this.profileRules = options.profileRules ?? [];
    this.state = this.buildState();
    const given: LimitedGrant[] = [
      ...(options.sessionGrants ?? []).map((key) => ({ key })),
      ...(options.limitedGrants ?? []),
    ];
    for (const { key, uses, ttlMs } of given) {
      // One canonical form for every caller: patterns refused, a relative program resolved at the root.
      // A grant that can never match is refused here too (library callers), not only on the CLI.
      const canonical =
        this.parser !== undefined && key.startsWith(`${RUN_COMMAND}:`)
          ? canonicalGrantKey(this.parser, key, this.projectRoot)
          : parseGrant(key).raw;
      const limited = uses !== undefined || ttlMs !== undefined;
      this.grantSession(canonical, { origin: limited ? '--grant-for' : '--grant', uses, ttlMs });
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
        mentions(options.sessionGrants) ||
        mentions(options.limitedGrants?.map((g) => g.key)))
    )
      options = { ...options, commandParser: await createCommandParser() };
    const profileHashes = options.profiles ?? (await readProfileHashes(path.resolve(options.projectRoot)));
    return new PermissionEngine({ ...options, profiles: profileHashes }, config);
  }

  get mode(): PermissionMode {
    return this.modeValue;
  }

  /**
   * Set the mode. `source` says who: default this process (a flag, a person's approval of a plan, a
   * built-in profile); a project profile's mode is `persistent` and allows sandboxed calls only.
   */
  setMode(mode: PermissionMode, source: PolicySource = { trust: 'process', origin: 'this session' }): void {
    this.modeValue = mode;
    this.modeSource = source;
    this.state = { ...this.state, mode, modeSource: source };
  }

  /** Replace the active profile's rules (selecting a profile loads its rules). */
  setProfileRules(sources: readonly RuleSource[]): void {
    this.profileRules = sources;
    this.state = this.buildState();
  }

  /** The policy in effect that came from files: what a person last confirmed (or what the session started with). */
  confirmedPolicy(): PolicyView {
    return policyViewOf(this.fileConfig, this.confirmedProfiles);
  }

  /**
   * Re-read the policy files. Policy (rules, allowlist, profiles) only changes through a person: a
   * difference from the confirmed policy is shown to the confirmer and adopted only if they say yes;
   * with no confirmer, or a no, nothing changes. The mode is a starting mode: a confirmed change of it
   * is recorded for later sessions, the current mode stays.
   */
  async reload(signal?: AbortSignal): Promise<PolicyReload> {
    const { config } = await readProjectConfigFile(this.configFile);
    const profiles = await readProfileHashes(this.projectRoot);
    const tightened = this.applyTightening(policyViewOf(config, profiles));
    const change = policyChange(this.configFile, this.confirmedPolicy(), policyViewOf(config, profiles));
    if (change === undefined) {
      // Nothing that decides anything is left to confirm (formatting, grantedAt, roots, or only removals).
      return {
        changed: tightened,
        applied: tightened,
        diff: [],
        message: tightened
          ? 'The change only takes permissions away; it is in effect.'
          : 'The policy is unchanged.',
      };
    }
    const confirmed =
      this.confirmPolicy !== undefined && signal?.aborted !== true
        ? await this.confirmPolicy(change, signal).catch(() => false)
        : false;
    await this.recordPolicy(change, confirmed);
    if (!confirmed) {
      return {
        changed: true,
        applied: false,
        diff: change.lines,
        message:
          this.confirmPolicy === undefined
            ? `The policy on disk differs from the confirmed one and no person can be asked here, so nothing changed. A person reviews and confirms it with: capsule reload`
            : 'The policy on disk differs from the confirmed one; the person did not confirm it, so nothing changed.',
      };
    }
    this.fileConfig = config;
    this.confirmedProfiles = profiles;
    this.state = this.buildState();
    this.lastFingerprint = undefined;
    await this.snapshots?.write(this.projectRoot, this.confirmedPolicy(), 'confirmed at a prompt');
    return {
      changed: true,
      applied: true,
      diff: change.lines,
      message: 'A person confirmed the policy change; it is in effect.',
    };
  }

  /**
   * Cheap check around calls that run host code: did capsule.json or a project profile change? What
   * only takes permissions away applies at once; anything else is reported once (returned, logged,
   * audited) and not loaded: only reload() with a person's confirmation adopts it.
   */
  async checkProtectedFiles(): Promise<string | undefined> {
    const fingerprint = await this.protectedFingerprint();
    if (fingerprint === this.lastFingerprint) return undefined;
    this.lastFingerprint = fingerprint;
    let change: PolicyChange | undefined;
    try {
      const onDisk = policyViewOf(
        (await readProjectConfigFile(this.configFile)).config,
        await readProfileHashes(this.projectRoot),
      );
      this.applyTightening(onDisk);
      change = policyChange(this.configFile, this.confirmedPolicy(), onDisk);
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      const warning = `capsule's protected files changed while something ran and no longer load (${why}); the confirmed policy stays in effect.`;
      this.logger(warning);
      await this.recordProtected(warning);
      return warning;
    }
    if (change === undefined) return undefined;
    const warning =
      `capsule.json or a project profile was changed while something ran (${change.lines.join('; ')}). ` +
      'The change is not applied: the confirmed policy stays in effect until a person confirms it (capsule reload).';
    this.logger(warning);
    await this.recordProtected(warning);
    return warning;
  }

  /**
   * What on disk only takes something away (a removed allow rule or entry, an added deny rule or Deny
   * entry) applies at once: it can only make capsule ask or deny more.
   * The mode of a running session stays. Returns whether anything was applied.
   */
  private applyTightening(onDisk: PolicyView): boolean {
    const confirmed = this.confirmedPolicy();
    const tightened = tightenOnly(confirmed, onDisk);
    if (policyChange(this.configFile, confirmed, tightened) === undefined) return false;
    this.fileConfig = configWithPolicy(this.fileConfig, tightened);
    this.confirmedProfiles = tightened.profiles;
    this.state = this.buildState();
    return true;
  }

  /** size, times and inode of capsule.json and of every project profile: changes whenever either is written. */
  private async protectedFingerprint(): Promise<string> {
    const parts: string[] = [];
    const one = async (file: string): Promise<void> => {
      try {
        const st = await stat(file, { bigint: true });
        parts.push(`${file}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`);
      } catch {
        parts.push(`${file}:-`);
      }
    };
    await one(this.configFile);
    const dir = path.join(this.projectRoot, PROFILES_DIR);
    await one(dir);
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names.sort()) await one(path.join(dir, name));
    return parts.join('\n');
  }

  private async recordPolicy(change: PolicyChange, confirmed: boolean): Promise<void> {
    const asked = this.confirmPolicy !== undefined;
    await this.audit?.append(policyChangeRecord(change, confirmed, this.modeValue, asked));
  }

  private async recordProtected(reason: string): Promise<void> {
    await this.audit?.append(protectedChangeRecord(reason, this.modeValue));
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
    await setAllowlistEntry(this.configFile, request.key.raw, entry);
    // Only this entry is adopted: whatever else the file holds now was not confirmed by anyone.
    this.fileConfig = {
      ...this.fileConfig,
      allowlist: { ...this.fileConfig.allowlist, [request.key.raw]: entry },
    };
    this.state = this.buildState();
    await this.recordConfirmed('project grant at a prompt');
  }

  /**
   * Save rules a person gave at a prompt in capsule.json; only they are adopted (whatever else the
   * file holds now was not confirmed by anyone).
   */
  private async saveRules(additions: { allow?: string[]; deny?: string[] }, by: string): Promise<void> {
    await addPermissionRules(this.configFile, additions);
    const { allow, deny } = this.fileConfig.permissions;
    const union = (a: readonly string[], b: readonly string[] = []): string[] => [
      ...a,
      ...b.filter((r) => !a.includes(r)),
    ];
    this.fileConfig = {
      ...this.fileConfig,
      permissions: { allow: union(allow, additions.allow), deny: union(deny, additions.deny) },
    };
    this.state = this.buildState();
    await this.recordConfirmed(by);
  }

  /** Remove a project entry (`capsule grants revoke`): on disk and in effect, nothing else re-read. */
  async revokeProject(key: string): Promise<boolean> {
    const removed = await removeAllowlistEntry(this.configFile, key);
    const inEffect = key in this.fileConfig.allowlist;
    const allowlist = { ...this.fileConfig.allowlist };
    delete allowlist[key];
    this.fileConfig = { ...this.fileConfig, allowlist };
    this.state = this.buildState();
    if (removed || inEffect) await this.recordConfirmed('capsule grants revoke');
    return removed || inEffect;
  }

  /** Keep the cross-process snapshot in step with a human-side change, if this project has one. */
  private async recordConfirmed(by: string): Promise<void> {
    if (this.snapshots === undefined) return;
    try {
      // Only a genuine confirmation is kept in step; an untrusted one waits for capsule reload.
      if ((await this.snapshots.load(this.projectRoot)).state !== 'confirmed') return;
      await this.snapshots.write(this.projectRoot, this.confirmedPolicy(), by);
    } catch (err) {
      this.logger(
        `could not record the confirmed policy: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }

  explain(input: PermissionRequest): Explanation {
    const request = this.withParts(input);
    const ceiling = ceilingFor(request);
    const base = { mode: this.modeValue, ceiling };
    try {
      const v = decide(this.state, request);
      if (v.outcome === 'ask' && this.sessionDenials.has(request.key.raw)) {
        const reason = `${request.key.raw} was refused for this session at the prompt.`;
        return { ...base, outcome: 'deny', source: 'session-deny', reason, trace: v.trace };
      }
      return v.outcome === 'ask'
        ? {
            ...base,
            outcome: 'ask',
            source: 'ask',
            reason: v.reason,
            options: withSessionDeny(v.options),
            unproven: v.unproven,
            trace: v.trace,
          }
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
    if (this.sessionDenials.has(request.key.raw)) return this.deniedForSession(request);
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
    if (this.sessionDenials.has(key)) return this.deniedForSession(request);
    const options = withSessionDeny(verdict.options);
    const reply: AskReply =
      signal?.aborted === true
        ? { answer: 'Deny' }
        : replyOf(
            await this.prompter.ask(
              { request, key, options, ceiling: verdict.ceiling, note: verdict.note },
              signal,
            ),
          );
    return applyAnswer(this.answers, request, verdict, options, reply);
  }

  private async deniedForSession(request: PermissionRequest): Promise<Decision> {
    const key = request.key.raw;
    const reason = `Permission denied: ${key} was refused for this session at the prompt; capsule does not ask again. Do something else, or ask the person in your reply.`;
    await this.record(request, { decision: 'deny', source: 'session-deny', reason });
    const denial = denialOf(request, 'session-deny', reason, { ceiling: ceilingFor(request).ceiling });
    return { outcome: 'deny', source: 'session-deny', reason, key, denial };
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

  /**
   * decide(), with a ceiling violation recorded in the audit log before it is thrown. A session
   * grant's use is reserved here, synchronously with the decision (no await in between), so
   * concurrent checks cannot all spend one remaining use while the audit append is in flight.
   */
  private async decideAndAudit(request: PermissionRequest): Promise<Verdict> {
    try {
      const verdict = this.decideAndReserve(request);
      if (verdict.outcome === 'ask') this.warnIgnored(request, verdict);
      return verdict;
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

  private decideAndReserve(request: PermissionRequest): Verdict {
    const verdict = decide(this.state, request);
    if (verdict.outcome === 'ask' || verdict.sessionEntry === undefined) return verdict;
    if (this.session.reserve(verdict.sessionEntry)) return verdict;
    // The entry found is no longer live: decide again without it (it is gone from the allowlist).
    return this.decideAndReserve(request);
  }

  private async finish(
    request: PermissionRequest,
    verdict: Exclude<Verdict, { outcome: 'ask' }>,
  ): Promise<Decision> {
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
      denial:
        verdict.outcome === 'deny'
          ? denialOf(request, verdict.source, verdict.reason, {
              matched: verdict.matched,
              ceiling: ceilingFor(request).ceiling,
            })
          : undefined,
    };
  }

  private async record(request: PermissionRequest, event: DecisionFields): Promise<void> {
    await this.audit?.append(decisionRecord(request, this.modeValue, event));
  }

  /** One network request of a running capability, in the audit log (tool `network`). */
  async recordNetwork(record: EgressRecord): Promise<void> {
    await this.audit?.append(networkRecord(record, this.modeValue));
  }

  /** The denial text: names the key and says exactly how to allow it. */
  denialMessage(request: PermissionRequest, ceiling: CeilingVerdict, asked: boolean): string {
    return denialMessage(request, ceiling, asked, this.configFile);
  }

  /** Say (once each) which project-file allows were passed over because the call is not sandboxed. */
  private warnIgnored(request: PermissionRequest, verdict: Extract<Verdict, { outcome: 'ask' }>): void {
    for (const what of verdict.ignored) {
      if (this.warned.has(what)) continue;
      this.warned.add(what);
      this.logger(ignoredAllowText(what, request, verdict.ceiling));
    }
  }

  private buildState(): PolicyState {
    const rules = buildRuleSet([
      // capsule.json travels with the repository: its rules are a persistent source.
      { ...this.fileConfig.permissions, origin: PROJECT_CONFIG_FILE, trust: 'persistent' },
      ...this.profileRules,
    ]);
    const root = this.projectRoot;
    return {
      mode: this.modeValue,
      modeSource: this.modeSource,
      rules,
      project: indexProjectAllowlist(this.configFile, normalizeAllowlist(this.fileConfig.allowlist)),
      session: this.session,
      globs: this.state?.globs ?? new GlobCache(),
      protectedTarget: (subject) => protectedStateHit(root, subject)?.protectedPath,
    };
  }
}
