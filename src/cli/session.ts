import path from 'node:path';
import {
  loadProjectConfig,
  PROJECT_CONFIG_FILE,
  type LoadedProjectConfig,
} from '../config/project-config.js';
import { Executor } from '../executor/executor.js';
import { MinimalGate } from '../permissions/minimal-gate.js';
import type { PermissionGate } from '../permissions/types.js';
import { Registry } from '../registry/registry.js';
import { ShellRunner } from '../runners/shell-runner.js';
import type { Runner } from '../runners/types.js';
import type { CliIO } from './output.js';

export interface SessionFlags {
  grants?: readonly string[];
  noPrompt?: boolean;
  mode?: string | undefined;
}

export interface CliSession {
  project: LoadedProjectConfig;
  registry: Registry;
  executor: Executor;
  close(): Promise<void>;
}

/** Paths no capability may be granted write access to. */
export function protectedPaths(projectRoot: string): string[] {
  return [path.join(projectRoot, PROJECT_CONFIG_FILE), path.join(projectRoot, '.capsule')];
}

export async function openProject(io: CliIO): Promise<{ project: LoadedProjectConfig; registry: Registry }> {
  const project = await loadProjectConfig(io.cwd);
  const registry = new Registry({
    roots: project.config.roots,
    projectRoot: project.root,
    protectedPaths: protectedPaths(project.root),
  });
  return { project, registry };
}

function createRunners(_project: LoadedProjectConfig): Runner[] {
  return [new ShellRunner()];
}

function createGate(_project: LoadedProjectConfig, flags: SessionFlags, _io: CliIO): PermissionGate {
  return new MinimalGate({ sessionGrants: flags.grants ?? [] });
}

/** Everything one CLI invocation needs, built explicitly (no module-level state). */
export async function openSession(io: CliIO, flags: SessionFlags): Promise<CliSession> {
  const { project, registry } = await openProject(io);
  const runners = createRunners(project);
  const executor = new Executor({ registry, gate: createGate(project, flags, io), runners });
  return { project, registry, executor, close: () => executor.close() };
}
