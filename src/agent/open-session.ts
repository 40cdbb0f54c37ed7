import type { LimitedGrant } from '../permissions/grant-lifetime.js';
import type { PermissionMode } from '../project/project-config.js';
import type { PolicyConfirmer } from '../permissions/policy-diff.js';
import { createNonInteractivePrompter, type Prompter } from '../permissions/prompter.js';
import type { Runner } from '../runners/types.js';
import { componentizeJs } from '../runners/wasm/componentize.js';
import { openRuntime } from '../runtime/runtime.js';
import type { Telemetry } from '../telemetry/telemetry.js';
import type { Componentize } from '../tools/ports.js';
import { AgentSession, type PlanApproval } from './agent-session.js';
import type { WriteConfirmer } from './learn-tool.js';
import { ProfileCatalog } from './profile.js';

export interface OpenAgentSessionOptions {
  /** Where capsule was started; the project root is the nearest ancestor holding capsule.json. */
  cwd: string;
  /** capsule's own environment (runners take granted variables from it). Default `process.env`. */
  env?: NodeJS.ProcessEnv | undefined;
  /** Profile name (default `build`). */
  profile?: string | undefined;
  /** Mode after the profile's (`--mode`). */
  mode?: PermissionMode | undefined;
  /** `--grant KEY`: session grants given up front (canonicalized like the CLI's). */
  grants?: readonly string[] | undefined;
  /** `--grant-for LIFETIME=KEY`: session grants that end after some uses or some time. */
  limitedGrants?: readonly LimitedGrant[] | undefined;
  /** Who answers an Ask. Default: nobody (every Ask is a denial that says how to allow it). */
  prompter?: Prompter | undefined;
  approvePlan?: PlanApproval | undefined;
  /** Who confirms a changed policy on reload (MCP: elicitation). Default: nobody, so it is never adopted. */
  confirmPolicy?: PolicyConfirmer | undefined;
  /** Who says yes before learn_capability writes (MCP: elicitation). Default: nobody, so it never writes. */
  confirmWrite?: WriteConfirmer | undefined;
  /**
   * capsule's per-user state folder, where the confirmed policy of each project is kept
   * (default: userStateDir(env)). false: keep nothing across sessions (the files at start are taken).
   */
  stateDir?: string | false | undefined;
  /** Replace the runners (tests); default shell + wasm + docker. */
  runners?: readonly Runner[] | undefined;
  /** Replace the JS → Wasm component builder (tests); default componentize-qjs. */
  componentize?: Componentize | undefined;
  /** Image build progress of the docker runner. */
  onRunnerProgress?: ((message: string) => void) | undefined;
  /** Warnings that must not stop a call. */
  logger?: ((message: string) => void) | undefined;
  /** capsule's per-user cache folder; default `userCacheDir(env)`. */
  cacheDir?: string | undefined;
  /** Decision and run spans; default the registered tracer provider's, if any (docs/telemetry.md). */
  telemetry?: Telemetry | undefined;
}

export const defaultComponentize: Componentize = async (source, options) => {
  const built = await componentizeJs(source, { onProgress: (e) => options.onProgress?.(e.message) });
  return built.component;
};

/**
 * Everything an agent session needs, from the one composition root the CLI uses too (openRuntime):
 * real-path project root, canonical grants, registry and runners; then the permission engine (with
 * the given prompter), the profile catalog and the active profile.
 */
export async function openAgentSession(options: OpenAgentSessionOptions): Promise<AgentSession> {
  // Runners exist before the session; their progress reaches it through this late-bound sink.
  const sink: { to?: (message: string) => void } = {};
  // The policy is fixed at the start of a session: the confirmed one (recorded on first use), so an
  // agent that rewrites capsule.json or a profile in one session gains nothing in the next.
  const runtime = await openRuntime({
    cwd: options.cwd,
    env: options.env,
    grants: options.grants,
    limitedGrants: options.limitedGrants,
    runners: options.runners,
    stateDir: options.stateDir,
    cacheDir: options.cacheDir,
    recordFirstUse: true,
    telemetry: options.telemetry,
    onRunnerProgress: (message) => {
      options.onRunnerProgress?.(message);
      sink.to?.(message);
    },
  });
  const root = runtime.root;
  const log = options.logger ?? ((m: string) => process.stderr.write(`capsule: ${m}\n`));
  if (runtime.starting.warning !== undefined) log(runtime.starting.warning);
  for (const w of runtime.warnings) log(w);
  const profiles = await ProfileCatalog.load({
    projectRoot: root,
    projectProfiles: runtime.starting.profileTexts,
  });
  const profile = profiles.get(options.profile ?? 'build');
  const commands = await runtime.commandParser();
  const engine = await runtime.openGate({
    prompter: options.prompter ?? createNonInteractivePrompter(),
    logger: log,
    confirmPolicy: options.confirmPolicy,
  });
  const session = await AgentSession.create({
    projectRoot: root,
    env: runtime.env,
    cacheDir: runtime.cacheDir,
    stateDir: runtime.stateDir,
    stageDir: runtime.stageDir,
    telemetry: runtime.telemetry,
    registry: runtime.registry,
    runners: runtime.runners,
    gate: engine,
    commands,
    profiles,
    profile,
    componentize: options.componentize ?? defaultComponentize,
    approvePlan: options.approvePlan,
    confirmWrite: options.confirmWrite,
    childGate: async ({ grants: childGrants, profile: childProfile }) =>
      // A child never prompts, never writes the audit chain of its parent, and starts from no project
      // grants: it holds only the intersection computed by the parent.
      runtime.openGate({
        prompter: createNonInteractivePrompter(),
        mode: childProfile.mode,
        modeSource: { trust: childProfile.trust, origin: `profile:${childProfile.name}` },
        sessionGrants: childGrants,
        projectAllowlist: false,
        audit: false,
      }),
  });
  sink.to = (message) => session.reportRunnerProgress(message);
  if (options.mode !== undefined) session.gate.setMode(options.mode);
  return session;
}
