import { loadProjectConfig, type LoadedProjectConfig } from '../config/project-config.js';
import { Executor } from '../executor/executor.js';
import { createDefaultRunners } from '../executor/runners.js';
import type { CommandParser } from '../permissions/command-parser.js';
import type { PermissionEngine } from '../permissions/engine.js';
import { createSessionEngine } from '../permissions/session-gate.js';
import {
  defaultStateDir,
  PolicySnapshotStore,
  resolveStartingPolicy,
} from '../permissions/policy-snapshot.js';
import type { InputValidator } from '../manifest/input.js';
import { protectedPaths } from '../permissions/self-protection.js';
import { Registry } from '../registry/registry.js';
import { write, type CliIO } from './output.js';

export interface SessionFlags {
  grants?: readonly string[];
  noPrompt?: boolean;
  mode?: string | undefined;
  /** A bash parser the command already has (exec, explain), reused by the gate. */
  parser?: CommandParser | undefined;
}

export interface CliSession {
  project: LoadedProjectConfig;
  registry: Registry;
  executor: Executor;
  /** The permission engine behind the executor's gate (explain, grants). */
  engine: PermissionEngine;
  close(): Promise<void>;
}

/**
 * A registry over `roots` of a project. No capability may be granted write access to capsule's own
 * files (the permission engine's self-protection list).
 */
export function projectRegistry(
  projectRoot: string,
  roots: readonly string[],
  inputValidator?: InputValidator,
): Registry {
  return new Registry({
    roots,
    projectRoot,
    protectedPaths: protectedPaths(projectRoot).all,
    inputValidator,
  });
}

export async function openProject(io: CliIO): Promise<{ project: LoadedProjectConfig; registry: Registry }> {
  const project = await loadProjectConfig(io.cwd);
  return { project, registry: projectRegistry(project.root, project.config.roots) };
}

/**
 * The gate of one CLI process. Each process reads capsule.json afresh; where a person already
 * confirmed a policy for this project (capsule reload, an MCP or library session), a change on disk
 * that would widen it is not applied until `capsule reload` confirms it. A project never confirmed
 * runs on its files as they are (the ceiling keeps a repository's file from lifting unsandboxed calls).
 */
async function createGate(
  project: LoadedProjectConfig,
  flags: SessionFlags,
  io: CliIO,
): Promise<PermissionEngine> {
  const snapshots = new PolicySnapshotStore({ stateDir: defaultStateDir(io.env) });
  const starting = await resolveStartingPolicy({
    projectRoot: project.root,
    file: project.file,
    config: project.config,
    store: snapshots,
    recordFirstUse: false,
  });
  if (starting.warning !== undefined) await write(io.stderr, `capsule: ${starting.warning}\n`);
  return createSessionEngine({
    project: { ...project, config: starting.config },
    snapshots,
    grants: flags.grants,
    noPrompt: flags.noPrompt,
    mode: flags.mode,
    interactive: io.interactive,
    output: io.stderr,
    parser: flags.parser,
  });
}

/** Everything one CLI invocation needs, built explicitly (no module-level state). */
export async function openSession(io: CliIO, flags: SessionFlags): Promise<CliSession> {
  const { project, registry } = await openProject(io);
  const runners = createDefaultRunners({
    projectRoot: project.root,
    env: io.env,
    onProgress: (message) => void io.stderr.write(`${message}\n`),
  });
  const engine = await createGate(project, flags, io);
  const executor = new Executor({
    registry,
    gate: engine,
    runners,
  });
  return { project, registry, executor, engine, close: () => executor.close() };
}
