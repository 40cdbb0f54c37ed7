import { userCacheDir } from '../config/cache-dir.js';
import { loadProjectConfig, type LoadedProjectConfig } from '../config/project-config.js';
import { Executor } from '../executor/executor.js';
import { createDefaultRunners } from '../executor/runners.js';
import type { CommandParser } from '../permissions/command-parser.js';
import type { PermissionEngine } from '../permissions/engine.js';
import { createSessionEngine } from '../permissions/session-gate.js';
import type { InputValidator } from '../manifest/input.js';
import { protectedPaths } from '../permissions/protected-state.js';
import { Registry } from '../registry/registry.js';
import type { CliIO } from './output.js';

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
 * A registry over `roots` of a project. No capability may be granted any access to capsule's own
 * state (protected-state.ts), the per-user cache dir included.
 */
export function projectRegistry(
  projectRoot: string,
  roots: readonly string[],
  inputValidator?: InputValidator,
  cacheDir?: string,
): Registry {
  return new Registry({
    roots,
    projectRoot,
    protectedPaths: protectedPaths(projectRoot, cacheDir).all,
    inputValidator,
  });
}

export async function openProject(io: CliIO): Promise<{ project: LoadedProjectConfig; registry: Registry }> {
  const project = await loadProjectConfig(io.cwd);
  return {
    project,
    registry: projectRegistry(project.root, project.config.roots, undefined, userCacheDir(io.env)),
  };
}

function createGate(project: LoadedProjectConfig, flags: SessionFlags, io: CliIO): Promise<PermissionEngine> {
  return createSessionEngine({
    project,
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
    cacheDir: userCacheDir(io.env),
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
