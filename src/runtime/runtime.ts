import type { LimitedGrant } from '../permissions/grant-lifetime.js';
import { mkdir, realpath } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import {
  loadProjectConfig,
  type LoadedProjectConfig,
  type PermissionMode,
} from '../project/project-config.js';
import { userCacheDir } from '../base/cache-dir.js';
import type { StateKey } from '../project/state-key.js';
import { secretDir, userStateDir } from '../base/user-state.js';
import { ENGINE_ENV, resolveEngines, selectEngines } from '../project/engines.js';
import { CapsuleError } from '../base/errors.js';
import { Executor } from '../executor/executor.js';
import { CapabilityStage } from '../executor/stage.js';
import type { IsolationJudge } from '../executor/isolation.js';
import { openProjectAuditLog } from './audit.js';
import { createDefaultRunners } from './runners.js';
import { openPolicySnapshots, openStateKey } from './state.js';
import type { InputValidator } from '../manifest/input.js';
import type { AuditSink } from '../permissions/audit/record.js';
import type { PolicySource } from '../permissions/ceiling.js';
import type { PolicyConfirmer } from '../permissions/policy-diff.js';
import {
  resolveStartingPolicy,
  type PolicySnapshotStore,
  type StartingPolicy,
} from '../permissions/policy-snapshot.js';
import { canonicalGrantKey } from '../permissions/commands/permission.js';
import { createCommandParser, type CommandParser } from '../permissions/commands/parser.js';
import { PermissionEngine } from '../permissions/engine.js';
import { parseGrant, RUN_CAPABILITY, RUN_COMMAND } from '../permissions/keys.js';
import { closestNames } from '../project/never-matches.js';
import type { Prompter } from '../permissions/prompter.js';
import type { RuleSource } from '../permissions/rules.js';
import {
  confinedPaths,
  hostProtection,
  protectedPaths,
  type HostProtection,
  type ProtectedPaths,
} from '../project/protected-state.js';
import type { PermissionGate } from '../permissions/types.js';
import { Registry } from '../registry/registry.js';
import { ScanIndex, scanIndexPath } from '../registry/scan-index.js';
import type { Runner } from '../runners/types.js';
import { defaultTelemetry, type Telemetry } from '../telemetry/telemetry.js';

export interface RuntimeOptions {
  /** Where capsule was started; the project root is the nearest ancestor of its real path holding capsule.json. */
  cwd: string;
  /** capsule's own environment: runners take granted variables from it. Default `process.env`. */
  env?: NodeJS.ProcessEnv | undefined;
  /** `--grant KEY`s of this process, checked and canonicalized the same way on every surface. */
  grants?: readonly string[] | undefined;
  /** `--grant-for LIFETIME=KEY`s: session grants that end after some uses or some time. */
  limitedGrants?: readonly LimitedGrant[] | undefined;
  /** A bash parser the caller already has (it is built on first need otherwise). */
  parser?: CommandParser | undefined;
  /** Replace the runners (tests). Default: shell, wasm and docker, each starting lazily. */
  runners?: readonly Runner[] | undefined;
  /** Progress of long runner work (docker image builds). */
  onRunnerProgress?: ((message: string) => void) | undefined;
  /** `--engine NAME[,NAME]`: the configured Docker engines this process may use (default $CAPSULE_ENGINE, else all). */
  engine?: string | undefined;
  /**
   * capsule's per-user state folder (confirmed policies); default from `env`
   * (`$CAPSULE_STATE_DIR`, `$XDG_STATE_HOME/capsule`, `~/.local/state/capsule`); false: keep none.
   */
  stateDir?: string | false | undefined;
  /** capsule's per-user cache (transpiled components); default from `env` (`$XDG_CACHE_HOME/capsule`). */
  cacheDir?: string | undefined;
  /**
   * Record the policy on disk as confirmed when none is yet (agent sessions: what an agent changes in
   * one session is then not adopted by the next). CLI commands do not.
   */
  recordFirstUse?: boolean | undefined;
  /**
   * Where decisions and runs are exported as OpenTelemetry spans. Default: the process's registered
   * tracer provider when there is one (docs/telemetry.md), else nowhere.
   */
  telemetry?: Telemetry | undefined;
}

export interface GateOptions {
  /** Who answers an Ask. */
  prompter: Prompter;
  /** Mode after capsule.json's (`--mode`, a profile's). */
  mode?: PermissionMode | undefined;
  /** Where `mode` came from (a project profile's mode is persistent: it cannot elevate host calls). */
  modeSource?: PolicySource | undefined;
  profileRules?: readonly RuleSource[] | undefined;
  /** Replace this process's grants (a child session's intersection); already canonical. */
  sessionGrants?: readonly string[] | undefined;
  /** False: start from no project allowlist entries (a child session). Default true. */
  projectAllowlist?: boolean | undefined;
  audit?: AuditSink | false | undefined;
  logger?: ((message: string) => void) | undefined;
  /** Who confirms a changed policy found by reload(); none: a change is reported, never adopted. */
  confirmPolicy?: PolicyConfirmer | undefined;
}

/**
 * What every surface (CLI, MCP, library) of one capsule process shares, built in one place so that
 * none of them can drift: the project root as a real path, capsule's protected files under it, the
 * grant keys of this process in canonical form, the environment runners read, the registry and the
 * runners. Gates and executors are opened from it. Construct with openRuntime().
 */
export interface Runtime {
  /** capsule.json and its real-path root. */
  readonly project: LoadedProjectConfig;
  readonly root: string;
  /**
   * The policy this process starts from: the one a person last confirmed (tightened by what changed on
   * disk since), or the files as they are when none was confirmed yet.
   */
  readonly starting: StartingPolicy;
  /** Confirmed policies across processes (undefined when no state folder is kept). */
  readonly snapshots: PolicySnapshotStore | undefined;
  /** capsule's own state under the root: no capability, tool or grant may write it. */
  readonly protectedPaths: ProtectedPaths;
  readonly env: NodeJS.ProcessEnv;
  /** The per-user cache of executable artifacts: protected like capsule's state, outside every root. */
  readonly cacheDir: string;
  /** The per-user state folder (confirmed policies, audit heads). */
  readonly stateDir: string;
  /** The key that authenticates what capsule keeps in `stateDir`. */
  readonly stateKey: StateKey;
  /** Where executors stage approved capabilities (under the per-user cache). */
  readonly stageDir: string;
  /** What a confined host process (shell capability, run_command, exec) sees read-only, and does not see. */
  readonly hostProtection: HostProtection;
  /** This process's `--grant` keys, canonical. */
  readonly grants: readonly string[];
  /**
   * Grants that can match but match nothing today (a capability name no capability in the project has),
   * with the closest names: for the surface to show; nothing is refused.
   */
  readonly warnings: readonly string[];
  readonly registry: Registry;
  readonly runners: readonly Runner[];
  /** Decision and run spans (a no-op unless a tracer provider is registered or one was passed). */
  readonly telemetry: Telemetry;
  /** The bash parser (run_command keying), built once on first use. */
  commandParser(): Promise<CommandParser>;
  /** A registry over other roots of this project, with the same protected set. */
  registryFor(roots: readonly string[], inputValidator?: InputValidator): Registry;
  openGate(options: GateOptions): Promise<PermissionEngine>;
  /** The executor over this runtime's registry and runners; its close() releases the runners. */
  openExecutor(gate: PermissionGate, options?: { isolation?: IsolationJudge | undefined }): Executor;
}

/** The project of `cwd`, found from its real path (a symlinked cwd names the same root as the real one). */
export async function openProjectAt(cwd: string): Promise<LoadedProjectConfig> {
  let real: string;
  try {
    real = await realpath(cwd);
  } catch (err) {
    throw new CapsuleError(
      'NOT_FOUND',
      `The working directory ${cwd} cannot be resolved (${(err as NodeJS.ErrnoException).code ?? 'error'}).`,
      { file: cwd },
      { cause: err },
    );
  }
  const project = await loadProjectConfig(real);
  return { ...project, root: await realpath(project.root) };
}

export interface ProjectRegistryOptions {
  inputValidator?: InputValidator | undefined;
  /** The per-user cache (protected like capsule's state). */
  cacheDir?: string | undefined;
  /** The per-user state folder (protected; the scan index lives there). */
  stateDir?: string | undefined;
  /**
   * The key of `stateDir`: with both, a scan index is kept there (listing and validation only), its
   * entries used only when their MAC verifies.
   */
  stateKey?: StateKey | undefined;
}

/**
 * A registry over `roots` of a project. No capability may be granted write access to capsule's own
 * files (the protected set of the root).
 */
export function projectRegistry(
  projectRoot: string,
  roots: readonly string[],
  options: ProjectRegistryOptions = {},
): Registry {
  const { stateDir, stateKey } = options;
  return new Registry({
    roots,
    projectRoot,
    protectedPaths: protectedPaths(projectRoot, options.cacheDir, stateDir).all,
    inputValidator: options.inputValidator,
    // Listing and validation only: a run resolves with registry.get(), which hashes the bytes.
    index:
      stateDir !== undefined && stateKey !== undefined
        ? new ScanIndex(scanIndexPath(stateDir, projectRoot, roots), { key: stateKey })
        : undefined,
  });
}

/**
 * `--grant` keys in the form the gate matches: every key parsed, run_command keys checked and
 * normalized by the real parser (a compound command's spacing does not matter; a simple command with
 * arguments is refused, it would silently never match). Throws USAGE naming the key.
 */
export async function canonicalGrants(
  grants: readonly string[],
  parser: () => Promise<CommandParser>,
): Promise<string[]> {
  const out: string[] = [];
  for (const grant of grants) {
    const key = parseGrant(grant);
    out.push(key.tool === RUN_COMMAND ? canonicalGrantKey(await parser(), grant) : key.raw);
  }
  return out;
}

/** `--grant run_capability:NAME` naming no capability of the project: said, with the closest names. */
async function grantWarnings(grants: readonly string[], registry: Registry): Promise<string[]> {
  const named = grants
    .filter((g) => g.startsWith(`${RUN_CAPABILITY}:`) && !g.endsWith('*'))
    .map((g) => g.slice(RUN_CAPABILITY.length + 1));
  if (named.length === 0) return [];
  let names: string[];
  let invalid: Map<string, string>;
  try {
    const scan = await registry.scan();
    names = scan.capabilities.map((c) => c.name);
    // A folder named like the grant whose manifest is invalid: the grant is right, the manifest is not.
    invalid = new Map(scan.invalid.map((i) => [i.folder, i.issues[0]?.file ?? i.dir]));
  } catch {
    return [];
  }
  return named
    .filter((n) => !names.includes(n))
    .map((n) => {
      const broken = invalid.get(n);
      if (broken !== undefined)
        return `--grant ${RUN_CAPABILITY}:${n}: its folder holds an invalid manifest (${broken}); capsule validate says why.`;
      const near = closestNames(n, names);
      return (
        `--grant ${RUN_CAPABILITY}:${n} matches no capability in this project today` +
        (near.length > 0 ? ` (closest: ${near.join(', ')})` : names.length === 0 ? ' (it has none)' : '') +
        '; it is kept for one that may appear.'
      );
    });
}

/** Build the runtime of one capsule process (one per CLI invocation, MCP server or library session). */
export async function openRuntime(options: RuntimeOptions): Promise<Runtime> {
  const project = await openProjectAt(options.cwd);
  const root = project.root;
  const env = options.env ?? process.env;
  // One per-user state folder for this process: confirmed policies and the audit log's head, and the
  // one key that authenticates them (read on first use).
  const stateDir = typeof options.stateDir === 'string' ? options.stateDir : userStateDir(env, homedir());
  const stateKey = openStateKey(stateDir);
  const cacheDir = options.cacheDir ?? userCacheDir(env);
  // They exist before the first read and the first host run, so the confinement can bind (or hide) them.
  // Staged copies of approved capabilities live under the per-user cache: outside every grantable root
  // and read-only to confined host processes, so nothing a run starts can swap approved bytes.
  const stageDir = path.join(cacheDir, 'stage');
  await Promise.all([
    ownFolder(secretDir(stateDir), 'state', 'CAPSULE_STATE_DIR or XDG_STATE_HOME'),
    ownFolder(stageDir, 'cache', 'XDG_CACHE_HOME'),
  ]);
  const snapshots = options.stateDir === false ? undefined : openPolicySnapshots(stateDir, stateKey);
  const starting = await resolveStartingPolicy({
    projectRoot: root,
    file: project.file,
    config: project.config,
    store: snapshots,
    recordFirstUse: options.recordFirstUse === true,
  });
  let parser: Promise<CommandParser> | undefined =
    options.parser !== undefined ? Promise.resolve(options.parser) : undefined;
  const commandParser = (): Promise<CommandParser> => (parser ??= createCommandParser());
  const grants = await canonicalGrants(options.grants ?? [], commandParser);
  const given = options.limitedGrants ?? [];
  const limitedKeys = await canonicalGrants(
    given.map((g) => g.key),
    commandParser,
  );
  const limitedGrants = given.map((g, i) => ({ ...g, key: limitedKeys[i] as string }));
  // The project's state folder too: one that is not there yet cannot be bound read-only, and a host
  // command could plant it (a hard link as the audit log) for capsule to write into later.
  await mkdir(protectedPaths(root).stateDir).catch((err: NodeJS.ErrnoException) => {
    // A read-only checkout: nothing to protect, and capsule writes no state there either.
    if (err.code !== 'EEXIST' && err.code !== 'EROFS' && err.code !== 'EACCES') throw err;
  });
  const hostProtected = hostProtection(confinedPaths(root, cacheDir, stateDir));
  const registryFor = (roots: readonly string[], inputValidator?: InputValidator): Registry =>
    projectRegistry(root, roots, {
      inputValidator,
      cacheDir,
      stateDir,
      stateKey: options.stateDir !== false ? stateKey : undefined,
    });
  const runners =
    options.runners ??
    createDefaultRunners({
      projectRoot: root,
      env,
      cacheDir,
      stateDir,
      stateKey: options.stateDir !== false ? stateKey : undefined,
      protection: hostProtected,
      onProgress: options.onRunnerProgress,
      engines: selectEngines(
        resolveEngines(starting.config.engines ?? {}, env),
        options.engine ?? env[ENGINE_ENV],
      ),
    });
  const registry = registryFor(project.config.roots);
  const warnings = await grantWarnings([...grants, ...limitedKeys], registry);
  const telemetry = options.telemetry ?? (await defaultTelemetry());
  return {
    project,
    root,
    starting,
    snapshots,
    protectedPaths: protectedPaths(root, cacheDir, stateDir),
    env,
    cacheDir,
    stateDir,
    stateKey,
    stageDir,
    hostProtection: hostProtected,
    grants,
    warnings,
    registry,
    runners,
    telemetry,
    commandParser,
    registryFor,
    async openGate(gate) {
      return PermissionEngine.create({
        projectRoot: root,
        configFile: project.file,
        config: gate.projectAllowlist === false ? { ...starting.config, allowlist: {} } : starting.config,
        profiles: starting.profiles,
        snapshots,
        confirmPolicy: gate.confirmPolicy,
        mode: gate.mode,
        modeSource: gate.modeSource,
        profileRules: gate.profileRules,
        sessionGrants: gate.sessionGrants ?? grants,
        // A child session holds only the intersection its parent computed: no lifetimes of its own.
        limitedGrants: gate.sessionGrants === undefined ? limitedGrants : undefined,
        prompter: gate.prompter,
        // The parser is needed only to key run_command; build it when something will.
        commandParser: parser !== undefined ? await parser : undefined,
        // The project's log, its head in this process's state folder under its key (false: a child's gate).
        audit: gate.audit ?? (await openProjectAuditLog({ projectRoot: root, stateDir, key: stateKey })),
        logger: gate.logger,
      });
    },
    openExecutor(gate, executorOptions = {}) {
      return new Executor({
        registry,
        gate,
        runners,
        isolation: executorOptions.isolation,
        stage: new CapabilityStage({ parent: stageDir }),
        telemetry,
      });
    },
  };
}

/**
 * Creates one of capsule's per-user folders (mode 0700). One that cannot be made (an unwritable or missing
 * home, a variable naming a file) is the user's set-up, not a bug: say which folder and how to choose another.
 */
async function ownFolder(dir: string, what: 'state' | 'cache', variables: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new CapsuleError(
      'CONFIG_INVALID',
      `capsule cannot create its per-user ${what} folder ${dir} (${code}): set ${variables} to a folder you can write, or make your home folder writable.`,
      {},
      { cause: err },
    );
  }
}
