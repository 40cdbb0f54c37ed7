import { realpath } from 'node:fs/promises';
import { homedir } from 'node:os';
import { userCacheDir } from '../base/cache-dir.js';
import { userStateDir } from '../base/user-state.js';
import type { CommandParser } from '../permissions/commands/parser.js';
import { PermissionEngine } from '../permissions/engine.js';
import { resolveStartingPolicy } from '../permissions/policy-snapshot.js';
import { createNonInteractivePrompter } from '../permissions/prompter.js';
import type { RuleSource } from '../permissions/rules.js';
import { loadProjectConfig } from '../project/project-config.js';
import type { StateKey } from '../project/state-key.js';
import { openPolicySnapshots, openStateKey } from './state.js';

/** Where the hook judges: the project's real root, and capsule's per-user folders and key. */
export interface HookPlace {
  root: string;
  stateDir: string;
  stateKey: StateKey;
  cacheDir: string;
}

export interface HookGateOptions {
  /** The folder Claude Code names as the project (its project dir, else the envelope's cwd). */
  projectDir: string;
  /** capsule's environment (the per-user state and cache folders are found from it). */
  env: NodeJS.ProcessEnv;
  /** The bash parser, when a Bash call is judged. */
  parser: CommandParser | undefined;
  /** Claude Code's settings as rule sources, read once the root is known. */
  profileRules: (root: string) => Promise<RuleSource[]>;
}

/**
 * The gate `capsule exec` opens (openRuntime's openGate): the same engine from the same starting policy
 * (the one a person confirmed, tightened by what changed on disk since), without the registry and the
 * runners a judge never uses, so Claude Code waits less on every tool call. It records nothing itself:
 * the hook writes one record per answer (openProjectAuditLog). Loaded lazily by the hook alone.
 */
export async function openHookGate(
  options: HookGateOptions,
): Promise<{ place: HookPlace; engine: PermissionEngine }> {
  const project = await loadProjectConfig(await realpath(options.projectDir));
  const root = await realpath(project.root);
  const stateDir = userStateDir(options.env, homedir());
  const stateKey = openStateKey(stateDir);
  const snapshots = openPolicySnapshots(stateDir, stateKey);
  const starting = await resolveStartingPolicy({
    projectRoot: root,
    file: project.file,
    config: project.config,
    store: snapshots,
    recordFirstUse: false,
  });
  const engine = await PermissionEngine.create({
    projectRoot: root,
    configFile: project.file,
    config: starting.config,
    profiles: starting.profiles,
    snapshots,
    prompter: createNonInteractivePrompter(),
    profileRules: await options.profileRules(root),
    commandParser: options.parser,
    audit: false,
    logger: () => undefined,
  });
  return { place: { root, stateDir, stateKey, cacheDir: userCacheDir(options.env) }, engine };
}
