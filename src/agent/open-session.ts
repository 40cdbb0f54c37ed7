import { userCacheDir } from '../config/cache-dir.js';
import { loadProjectConfig, type PermissionMode } from '../config/project-config.js';
import { createDefaultRunners } from '../executor/runners.js';
import { createCommandParser, type CommandParser } from '../permissions/command-parser.js';
import { PermissionEngine } from '../permissions/engine.js';
import { parseKey } from '../permissions/keys.js';
import { createNonInteractivePrompter, type Prompter } from '../permissions/prompter.js';
import { protectedPaths } from '../permissions/protected-state.js';
import { Registry } from '../registry/registry.js';
import type { Runner } from '../runners/types.js';
import { componentizeJs } from '../runners/wasm/componentize.js';
import type { Componentize } from '../tools/generate.js';
import { AgentSession, type PlanApproval } from './agent-session.js';
import { ProfileCatalog } from './profile.js';

export interface OpenAgentSessionOptions {
  /** Where capsule was started; the project root is the nearest ancestor holding capsule.json. */
  cwd: string;
  /** Profile name (default `build`). */
  profile?: string | undefined;
  /** Mode after the profile's (`--mode`). */
  mode?: PermissionMode | undefined;
  /** `--grant KEY`: session grants given up front. */
  grants?: readonly string[] | undefined;
  /** Who answers an Ask. Default: nobody (every Ask is a denial that says how to allow it). */
  prompter?: Prompter | undefined;
  approvePlan?: PlanApproval | undefined;
  /** Replace the runners (tests); default shell + wasm + docker. */
  runners?: readonly Runner[] | undefined;
  /** Replace the JS → Wasm component builder (tests); default componentize-qjs. */
  componentize?: Componentize | undefined;
  /** Image build progress of the docker runner. */
  onRunnerProgress?: ((message: string) => void) | undefined;
  /** Warnings that must not stop a call. */
  logger?: ((message: string) => void) | undefined;
  /** Host environment (granted variables, the cache dir's location). Default: this process's. */
  env?: NodeJS.ProcessEnv | undefined;
  /** capsule's per-user cache folder; default `userCacheDir(env)`. */
  cacheDir?: string | undefined;
}

export const defaultComponentize: Componentize = async (source, options) => {
  const built = await componentizeJs(source, { onProgress: (e) => options.onProgress?.(e.message) });
  return built.component;
};

/**
 * Everything an agent session needs, built explicitly: project config, registry, the permission
 * engine (with the given prompter), runners, the profile catalog and the active profile.
 */
export async function openAgentSession(options: OpenAgentSessionOptions): Promise<AgentSession> {
  const project = await loadProjectConfig(options.cwd);
  const root = project.root;
  const profiles = await ProfileCatalog.load({ projectRoot: root });
  const profile = profiles.get(options.profile ?? 'build');
  const env = options.env ?? process.env;
  const cacheDir = options.cacheDir ?? userCacheDir(env);
  const registry = new Registry({
    roots: project.config.roots,
    projectRoot: root,
    protectedPaths: protectedPaths(root, cacheDir).all,
  });
  const commands: CommandParser = await createCommandParser();
  const grants = (options.grants ?? []).map((g) => parseKey(g).raw);
  const engine = await PermissionEngine.create({
    projectRoot: root,
    configFile: project.file,
    config: project.config,
    sessionGrants: grants,
    prompter: options.prompter ?? createNonInteractivePrompter(),
    commandParser: commands,
    logger: options.logger,
  });
  // Runners exist before the session; their progress reaches it through this late-bound sink.
  const sink: { to?: (message: string) => void } = {};
  const onRunnerProgress = (message: string): void => {
    options.onRunnerProgress?.(message);
    sink.to?.(message);
  };
  const session = await AgentSession.create({
    projectRoot: root,
    cacheDir,
    registry,
    runners:
      options.runners ??
      createDefaultRunners({ projectRoot: root, env, cacheDir, onProgress: onRunnerProgress }),
    gate: engine,
    commands,
    profiles,
    profile,
    componentize: options.componentize ?? defaultComponentize,
    approvePlan: options.approvePlan,
    childGate: async ({ grants: childGrants, profile: childProfile }) =>
      // A child never prompts, never writes the audit chain of its parent, and starts from no project
      // grants: it holds only the intersection computed by the parent.
      PermissionEngine.create({
        projectRoot: root,
        configFile: project.file,
        config: { ...project.config, allowlist: {} },
        mode: childProfile.mode,
        sessionGrants: childGrants,
        prompter: createNonInteractivePrompter(),
        audit: false,
        commandParser: commands,
      }),
  });
  sink.to = (message) => session.reportRunnerProgress(message);
  if (options.mode !== undefined) session.gate.setMode(options.mode);
  return session;
}
