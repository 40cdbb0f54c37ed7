import { realpath } from 'node:fs/promises';
import type { AllowlistEntry, PermissionMode } from '../project/project-config.js';
import { CapsuleError } from '../base/errors.js';
import { Executor } from '../executor/executor.js';
import { CapabilityStage } from '../executor/stage.js';
import type { IsolationJudge } from '../executor/isolation.js';
import type { PolicySource } from '../permissions/ceiling.js';
import type { CommandParser } from '../permissions/commands/parser.js';
import type { PolicyReload } from '../permissions/engine.js';
import { grantCovers, parseKey } from '../permissions/keys.js';
import type { RuleSource } from '../permissions/rules.js';
import { protectedPaths } from '../project/protected-state.js';
import type { SessionAllowlist } from '../permissions/session-allowlist.js';
import type { PermissionGate } from '../permissions/types.js';
import type { Registry } from '../registry/registry.js';
import type { Runner } from '../runners/types.js';
import type { Telemetry } from '../telemetry/telemetry.js';
import type {
  AgentToolContext,
  ProgressReporter,
  ReloadSummary,
  SessionControl,
  CapabilityContext,
  Componentize,
} from '../tools/ports.js';
import { createToolCatalog, isToolName, READ_ONLY_TOOL_NAMES } from '../tools/catalog.js';
import { DEFAULT_SLEEP_MAX_SECONDS } from '../tools/control-tools.js';
import type { AgentTool } from '../tools/define.js';
import { Workspace } from '../tools/workspace.js';
import type { AgentProfile, ProfileCatalog } from './profile.js';
import { createLearnCapabilityTool, type WriteConfirmer } from './learn-tool.js';
import { createRunSubagentTool } from './subagent-tool.js';

/** The gate an agent session steers: the permission engine's surface for modes, rules and reload. */
export interface AgentGate extends PermissionGate {
  readonly mode: PermissionMode;
  setMode(mode: PermissionMode, source?: PolicySource): void;
  setProfileRules(sources: readonly RuleSource[]): void;
  /** Re-read the policy files; a difference is adopted only when a person confirms it. */
  reload(signal?: AbortSignal): Promise<PolicyReload>;
  /** After a host run: report (once) a change of capsule.json or a profile; never adopts it. */
  checkProtectedFiles(): Promise<string | undefined>;
  projectEntries(): AllowlistEntry[];
  readonly session: SessionAllowlist;
}

export type PlanApproval = (
  plan: string,
  signal?: AbortSignal,
) => Promise<{ approved: boolean; feedback?: string | undefined }>;

/** Builds the gate of a child session: its effective session grants, no prompts (children never ask). */
export type ChildGateFactory = (options: { grants: string[]; profile: AgentProfile }) => Promise<AgentGate>;

export interface AgentSessionOptions {
  projectRoot: string;
  /** capsule's own environment (run_command passes bash the harmless part of it). */
  env: NodeJS.ProcessEnv;
  registry: Registry;
  runners: readonly Runner[];
  gate: AgentGate;
  commands: CommandParser;
  profiles: ProfileCatalog;
  profile: AgentProfile;
  isolation?: IsolationJudge | undefined;
  componentize?: Componentize | undefined;
  /** Who approves exit_plan_mode (MCP: elicitation). Default: nobody, so plans stay unapproved. */
  approvePlan?: PlanApproval | undefined;
  /** Who says yes before learn_capability writes grants (MCP: elicitation). Default: nobody, so it never writes. */
  confirmWrite?: WriteConfirmer | undefined;
  /** Needed to create sub-agents (run_subagent); without it run_subagent is not offered. */
  childGate?: ChildGateFactory | undefined;
  sleepMaxSeconds?: number | undefined;
  /** 0 for a main agent, 1 for a sub-agent (locked: a child cannot create a grandchild). */
  depth?: 0 | 1 | undefined;
  /** capsule's per-user cache folder: protected like the project's own state. */
  cacheDir?: string | undefined;
  /** capsule's per-user state folder (confirmed policies, audit heads): protected the same way. */
  stateDir?: string | undefined;
  /** Where approved capabilities are staged (default: the OS temporary folder). */
  stageDir?: string | undefined;
  /** Decision and run spans (default: none). */
  telemetry?: Telemetry | undefined;
}

export interface CallOptions {
  signal?: AbortSignal | undefined;
  /** The caller's id of this call (an MCP request id), carried into telemetry. */
  callId?: string | undefined;
  progress?: ProgressReporter | undefined;
}

export interface SubAgentOptions {
  /** Profile of the child (its tools are cut to the read-only set regardless). Default `subagent`. */
  profile?: string | undefined;
  /** Grants the child asks for; it gets only those its parent holds too. */
  grants?: readonly string[] | undefined;
}

/**
 * One agent's session: the active profile (which tools exist, the mode, its rules), the catalog and
 * the executor that puts every call through the gate. Constructed explicitly; the MCP server and
 * the library both drive it.
 */
export class AgentSession {
  readonly depth: 0 | 1;
  readonly gate: AgentGate;
  readonly registry: Registry;
  readonly executor: Executor;
  private profileValue: AgentProfile;
  private readonly catalog: Map<string, AgentTool>;
  private readonly options: AgentSessionOptions;
  private readonly workspace: Workspace;
  private readonly control: SessionControl;
  /** Progress sinks of the calls in flight: runner-level progress (image builds) goes to each. */
  private readonly inFlight = new Set<ProgressReporter>();

  private constructor(options: AgentSessionOptions, workspace: Workspace) {
    this.options = options;
    this.depth = options.depth ?? (options.profile.subagent ? 1 : 0);
    this.gate = options.gate;
    this.registry = options.registry;
    this.workspace = workspace;
    this.executor = new Executor({
      registry: options.registry,
      gate: options.gate,
      runners: options.runners,
      isolation: options.isolation,
      stage: new CapabilityStage({ parent: options.stageDir }),
      telemetry: options.telemetry,
    });
    const tools = createToolCatalog({ env: options.env });
    if (this.depth === 0 && options.childGate !== undefined) tools.push(createRunSubagentTool());
    if (this.depth === 0)
      tools.push(
        createLearnCapabilityTool({
          executor: this.executor,
          confirmWrite: options.confirmWrite,
          place: async () => ({
            projectRoot: workspace.root,
            capabilityRoots: (
              await Promise.all(options.registry.roots.map((r) => realpath(r).catch(() => undefined)))
            ).filter((r): r is string => r !== undefined),
            protectedPaths: protectedPaths(workspace.root, options.cacheDir, options.stateDir).all,
          }),
        }),
      );
    this.catalog = new Map(tools.map((t) => [t.name, t]));
    this.profileValue = options.profile;
    this.control = {
      get mode() {
        return options.gate.mode;
      },
      setMode: (mode) => options.gate.setMode(mode),
      approvePlan: (plan, signal) =>
        options.approvePlan !== undefined
          ? options.approvePlan(plan, signal)
          : Promise.resolve({
              approved: false,
              feedback: 'no human is reachable to approve it in this session',
            }),
      reload: (signal) => this.reload(signal),
      spawnSubAgent: (sub) => this.createSubAgent(sub),
    };
    this.applyProfile(options.profile);
  }

  static async create(options: AgentSessionOptions): Promise<AgentSession> {
    const root = await realpath(options.projectRoot);
    const workspace = await Workspace.open({
      projectRoot: root,
      alsoProtected: options.cacheDir === undefined ? [] : [options.cacheDir],
      alsoHidden: options.stateDir === undefined ? [] : [options.stateDir],
    });
    return new AgentSession({ ...options, projectRoot: root }, workspace);
  }

  get profile(): AgentProfile {
    return this.profileValue;
  }

  get mode(): PermissionMode {
    return this.gate.mode;
  }

  /** The tools this session exposes: the profile's allowlist; for a sub-agent only Permission::None tools. */
  tools(): AgentTool[] {
    const allowed = new Set<string>(this.profileValue.tools);
    return [...this.catalog.values()].filter(
      (t) =>
        allowed.has(t.name) &&
        (this.depth === 0 || (READ_ONLY_TOOL_NAMES as readonly string[]).includes(t.name)),
    );
  }

  toolNames(): string[] {
    return this.tools().map((t) => t.name);
  }

  findTool(name: string): AgentTool | undefined {
    return this.tools().find((t) => t.name === name);
  }

  /** Selecting a profile resets the mode to the profile's and loads its rules into the gate. */
  selectProfile(name: string): AgentProfile {
    // A child keeps its read-only tool set whatever it selects: tools() filters by depth as well.
    const profile = this.options.profiles.get(name);
    this.applyProfile(profile);
    return profile;
  }

  /** Call one tool by name through the executor (arguments validated, permission, gate, execute). */
  async call(name: string, args: unknown, options: CallOptions = {}): Promise<unknown> {
    const tool = this.findTool(name);
    if (tool === undefined) {
      const why =
        this.depth === 1 && isToolName(name)
          ? 'a sub-agent only has read-only tools, and sub-agent depth is locked at 1 (no run_subagent)'
          : `the profile "${this.profileValue.name}" does not include it`;
      throw new CapsuleError('NOT_FOUND', `No tool named "${name}" in this session: ${why}.`, {
        hint: `Available: ${this.tools()
          .map((t) => t.name)
          .join(', ')}.`,
      });
    }
    // Host code (run_command, shell capabilities, a process they left behind) can write capsule.json
    // or .capsule/ directly. Looked at before and after every call that can change things: a change
    // that only takes permissions away applies before the call; anything else is reported with the
    // result and never loaded.
    const mutating = tool.kind !== 'READ_ONLY';
    const warnings: string[] = [];
    const look = async (): Promise<void> => {
      const warning = await this.gate.checkProtectedFiles();
      if (warning !== undefined) warnings.push(warning);
    };
    if (mutating) await look();
    if (options.progress !== undefined) this.inFlight.add(options.progress);
    let result: unknown;
    try {
      ({ result } = await this.executor.call<AgentToolContext, unknown>(
        tool,
        args,
        this.contextFor(options),
      ));
    } catch (err) {
      if (mutating) await look();
      throw err;
    } finally {
      if (options.progress !== undefined) this.inFlight.delete(options.progress);
    }
    if (mutating) await look();
    if (warnings.length === 0) return result;
    if (typeof result === 'object' && result !== null && !Array.isArray(result)) {
      const previous = (result as { warnings?: unknown }).warnings;
      return { ...result, warnings: [...(Array.isArray(previous) ? previous : []), ...warnings] };
    }
    return { value: result, warnings };
  }

  /** Progress from a runner (e.g. a docker image build on first use), shown to every call in flight. */
  reportRunnerProgress(message: string): void {
    for (const report of this.inFlight) report({ message, progress: 0 });
  }

  /**
   * Re-read the registry (freely) and the policy files: a changed policy is shown to a person
   * (the engine's confirmer) and adopted only on their yes.
   */
  async reload(signal?: AbortSignal): Promise<ReloadSummary> {
    const policy = await this.gate.reload(signal);
    const scan = await this.registry.scan();
    return {
      capabilities: scan.capabilities.length,
      invalid: scan.invalid.length,
      allowlistEntries: this.gate.projectEntries().length,
      policy,
    };
  }

  /**
   * A read-only child session (docs/mcp.md, "Sub-agents"): only Permission::None tools, depth 1 (it cannot create
   * a grandchild), and grants that are the intersection of what it asks for and what this session holds.
   */
  async createSubAgent(options: SubAgentOptions = {}): Promise<AgentSession> {
    if (this.depth >= 1) {
      throw new CapsuleError(
        'PERMISSION_DENIED',
        'A sub-agent cannot create another sub-agent: sub-agent depth is locked at 1.',
        {
          hint: 'Do the work in this sub-agent, or return to the parent agent.',
        },
      );
    }
    const factory = this.options.childGate;
    if (factory === undefined) {
      throw new CapsuleError('UNSUPPORTED', 'This session was built without sub-agent support.');
    }
    const profile = this.options.profiles.get(options.profile ?? 'subagent');
    const grants = intersectGrants(options.grants ?? [], this.heldGrants());
    const gate = await factory({ grants, profile });
    const child = await AgentSession.create({
      ...this.options,
      gate,
      profile,
      depth: 1,
      approvePlan: undefined,
      confirmWrite: undefined,
      childGate: undefined,
    });
    return child;
  }

  /** Keys this session holds without asking: live session grants and project allowlist entries. */
  heldGrants(): string[] {
    const session = this.gate.session.list().map((e) => e.key);
    const project = this.gate
      .projectEntries()
      .filter((e) => e.level === 'AlwaysThisProject')
      .map((e) => e.key);
    return [...new Set([...session, ...project])];
  }

  /** Releases the runners (a child shares its parent's and closes nothing). */
  async close(): Promise<void> {
    if (this.depth === 1) return;
    await this.executor.close();
  }

  private applyProfile(profile: AgentProfile): void {
    this.profileValue = profile;
    // A project profile is a repository file: its mode and allow rules carry that provenance.
    const origin = `profile:${profile.name}`;
    this.gate.setMode(profile.mode, { trust: profile.trust, origin: `${origin} (${profile.source})` });
    this.gate.setProfileRules([{ origin, trust: profile.trust, allow: profile.allow, deny: profile.deny }]);
  }

  private contextFor(options: CallOptions): Omit<AgentToolContext, keyof CapabilityContext> & {
    signal?: AbortSignal | undefined;
    callId?: string | undefined;
  } {
    return {
      signal: options.signal,
      callId: options.callId,
      progress: options.progress,
      workspace: this.workspace,
      protectedPaths: protectedPaths(this.workspace.root, this.options.cacheDir, this.options.stateDir).all,
      registry: this.registry,
      commands: this.options.commands,
      control: this.control,
      componentize: this.options.componentize,
      sleepMaxSeconds: this.options.sleepMaxSeconds ?? DEFAULT_SLEEP_MAX_SECONDS,
    };
  }
}

/**
 * A child's effective grants: each key it asks for that some grant of the parent covers (a wildcard
 * parent grant covers narrower child keys; a child wildcard is kept only if the parent holds it exactly).
 */
export function intersectGrants(requested: readonly string[], parent: readonly string[]): string[] {
  const out: string[] = [];
  for (const key of requested) {
    const parsed = parseKey(key);
    if (parent.includes(key) || parent.some((p) => grantCovers(p, parsed) && !key.endsWith('*')))
      out.push(key);
  }
  return [...new Set(out)];
}
