import { realpath } from 'node:fs/promises';
import type { PermissionMode } from '../project/modes.js';
import type { LoadedProjectConfig } from '../project/project-config.js';
import type { Executor } from '../executor/executor.js';
import { homedir } from 'node:os';
import type { StateKey } from '../project/state-key.js';
import { userStateDir } from '../base/user-state.js';
import type { InputValidator } from '../manifest/input.js';
import { userCacheDir } from '../base/cache-dir.js';
import type { CommandParser } from '../permissions/commands/parser.js';
import type { PermissionEngine } from '../permissions/engine.js';
import type { OneUseGrantStore } from '../permissions/one-use-grants.js';
import type { PolicySnapshotStore } from '../permissions/policy-snapshot.js';
import type { HostProtection } from '../project/protected-state.js';
import { cliPrompter, fileModeWarning } from '../permissions/session-gate.js';
import { parseLimitedGrant } from '../permissions/grant-lifetime.js';
import type { Registry } from '../registry/registry.js';
import { openProjectAt, openRuntime, projectRegistry } from '../runtime/runtime.js';
import { openOneUseGrants, openPolicySnapshots, openStateKey } from '../runtime/state.js';
import { progressLine, type CliIO } from './output.js';

export { projectRegistry };

export interface SessionFlags {
  grants?: readonly string[];
  /** `--grant-for LIFETIME=KEY`, as typed. */
  grantFor?: readonly string[] | undefined;
  noPrompt?: boolean;
  /** `--mode`, already one of the modes (commander checks the choice: the CLI's one parse of it). */
  mode?: PermissionMode | undefined;
  /** A bash parser the command already has (exec, explain), reused by the gate. */
  parser?: CommandParser | undefined;
  /** `--engine NAME[,NAME]` (run, compare, ci). */
  engine?: string | undefined;
  /** The command, for its progress lines (building images, measuring an engine); `json`: none. */
  command?: string | undefined;
  json?: boolean | undefined;
}

export interface CliSession {
  project: LoadedProjectConfig;
  registry: Registry;
  executor: Executor;
  /** The permission engine behind the executor's gate (explain, grants). */
  engine: PermissionEngine;
  /** What a confined host process may not change or see (capsule's state, the per-user cache and state). */
  hostProtection: HostProtection;
  /** capsule's own state: the project's protected paths and the per-user cache and state folders. */
  protectedPaths: string[];
  /** The real paths of the project's capability roots (those that exist). */
  realRoots(): Promise<string[]>;
  close(): Promise<void>;
}

/** The project of the current directory (real-path root) and its registry: for commands that run nothing. */
export async function openProject(io: CliIO): Promise<{ project: LoadedProjectConfig; registry: Registry }> {
  const project = await openProjectAt(io.cwd);
  return { project, registry: cliRegistry(io, project.root, project.config.roots) };
}

/** A registry over `roots` of a project, with this invocation's cache, state folder and key. */
export function cliRegistry(
  io: CliIO,
  projectRoot: string,
  roots: readonly string[],
  inputValidator?: InputValidator,
): Registry {
  return projectRegistry(projectRoot, roots, {
    inputValidator,
    cacheDir: userCacheDir(io.env),
    stateDir: cliStateDir(io),
    stateKey: cliStateKey(io),
  });
}

/** The per-user state directory of this invocation (from its environment). */
export function cliStateDir(io: CliIO): string {
  return userStateDir(io.env, homedir());
}

/** The key of that folder, for commands that read or write capsule's state without a runtime. */
export function cliStateKey(io: CliIO): StateKey {
  return openStateKey(cliStateDir(io));
}

/** The confirmed policies of this invocation's state folder (reload, rules import, engines). */
export function cliPolicySnapshots(io: CliIO): PolicySnapshotStore {
  return openPolicySnapshots(cliStateDir(io), cliStateKey(io));
}

/** The one-use grants of this invocation's state folder (`exec --grant-id`). */
export function cliOneUseGrants(io: CliIO): OneUseGrantStore {
  return openOneUseGrants(cliStateDir(io), cliStateKey(io));
}

/**
 * Everything one CLI invocation needs, from the one composition root (openRuntime) that MCP and the
 * library use too. `--no-prompt` or no TTY turns every Ask into a denial. Each process reads
 * capsule.json afresh; where a person already confirmed a policy for this project (capsule reload, an
 * MCP or library session), a change on disk that would widen it is not applied until `capsule reload`
 * confirms it. A project never confirmed runs on its files as they are (the ceiling keeps a
 * repository's file from lifting unsandboxed calls).
 */
export async function openSession(io: CliIO, flags: SessionFlags): Promise<CliSession> {
  const mode = flags.mode;
  const runtime = await openRuntime({
    cwd: io.cwd,
    env: io.env,
    grants: flags.grants,
    limitedGrants: (flags.grantFor ?? []).map((g) => parseLimitedGrant(g)),
    parser: flags.parser,
    engine: flags.engine,
    onRunnerProgress: progressLine(io, flags.command ?? 'run', { json: flags.json }),
  });
  const prompter = cliPrompter({
    noPrompt: flags.noPrompt,
    interactive: io.interactive,
    input: io.stdin,
    output: io.stderr,
  });
  // Warnings (a project file's mode or rule that does not apply) go where the person looks.
  const logger = (message: string): void => void io.stderr.write(`capsule: ${message}\n`);
  if (runtime.starting.warning !== undefined) logger(runtime.starting.warning);
  for (const w of runtime.warnings) logger(w);
  const project = { ...runtime.project, config: runtime.starting.config };
  const warning = fileModeWarning(project, mode, prompter.interactive);
  if (warning !== undefined) logger(warning);
  const engine = await runtime.openGate({ prompter, mode, logger });
  const executor = runtime.openExecutor(engine);
  return {
    project: runtime.project,
    registry: runtime.registry,
    executor,
    engine,
    hostProtection: runtime.hostProtection,
    protectedPaths: runtime.protectedPaths.all,
    realRoots: async () => {
      const real = await Promise.all(runtime.registry.roots.map((r) => realpath(r).catch(() => undefined)));
      return real.filter((r): r is string => r !== undefined);
    },
    close: () => executor.close(),
  };
}
