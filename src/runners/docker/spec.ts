import path from 'node:path';
import type { Capability } from '../../manifest/types.js';
import { TOOLS_MOUNT } from './call.js';
import type { ContainerSpec, Mount } from './engine.js';

/** Where things appear inside a capsule container. */
export const CAPABILITY_MOUNT = '/capability';
export const PROJECT_MOUNT = '/project';
export const SANDBOX_USER = '65534:65534';
/** Where a run's egress proxy socket appears (capabilities with grants.network; see docs/network.md). */
export const EGRESS_MOUNT = '/run/capsule';
const EGRESS_SOCKET = `${EGRESS_MOUNT}/egress.sock`;

const INTERPRETER_COMMANDS: Record<string, string> = {
  sh: '/bin/sh',
  bash: 'bash',
  node: 'node',
  python3: 'python3',
};

export interface SpecOptions {
  /** How the capability folder reaches the container: a bind mount of the folder or a volume holding a copy. */
  capabilityFiles: { type: 'bind'; hostPath: string } | { type: 'volume'; volume: string };
  labels: Record<string, string>;
  /** Host environment to take granted variables from. */
  hostEnv: NodeJS.ProcessEnv;
  /** CPU share in cores (NanoCpus / 1e9). */
  cpus: number;
  /** PID 1 that carries the call's deadline (call.ts watchdogEntrypoint). */
  watchdog?: readonly string[] | undefined;
  /** Volume with the watchdog's busybox, mounted read-only at TOOLS_MOUNT (images other than capsule's). */
  toolsVolume?: string | undefined;
  /** Host folder holding this run's egress proxy socket, mounted read-only at EGRESS_MOUNT. */
  egressDir?: string | undefined;
}

/** The command line inside the container: interpreter (if any), the entry under /capability, then args. */
export function containerCommand(capability: Capability): string[] {
  const entry = path.posix.join(CAPABILITY_MOUNT, capability.manifest.entry);
  const interpreter = capability.manifest.interpreter;
  const head =
    interpreter === undefined ? [entry] : [INTERPRETER_COMMANDS[interpreter] ?? interpreter, entry];
  return [...head, ...capability.manifest.args];
}

/**
 * The hardened container for one call, as a pure function of the capability. Every relaxation comes
 * from the manifest (and is reported by dockerIsolation); nothing else is configurable here on purpose.
 */
export function buildContainerSpec(capability: Capability, options: SpecOptions): ContainerSpec {
  const docker = capability.manifest.docker;
  if (docker === undefined)
    throw new Error(`buildContainerSpec: ${capability.name} is not a docker capability`);
  const limits = capability.manifest.limits;
  const memoryBytes = limits.memoryMb * 1024 * 1024;
  const tmpfsMb = Math.max(1, Math.min(64, limits.memoryMb));

  const mounts: Mount[] = [
    options.capabilityFiles.type === 'bind'
      ? { type: 'bind', source: options.capabilityFiles.hostPath, target: CAPABILITY_MOUNT, readOnly: true }
      : { type: 'volume', source: options.capabilityFiles.volume, target: CAPABILITY_MOUNT, readOnly: true },
  ];
  if (options.toolsVolume !== undefined)
    mounts.push({ type: 'volume', source: options.toolsVolume, target: TOOLS_MOUNT, readOnly: true });
  // Each granted path is mounted alone (the narrowest option), at the same relative place under /project.
  for (const grant of capability.fsGrants) {
    mounts.push({
      type: 'bind',
      source: grant.hostPath,
      target: path.posix.join(PROJECT_MOUNT, grant.declared),
      readOnly: grant.mode !== 'rw',
    });
  }

  const env = ['HOME=/tmp', `CAPSULE_CAPABILITY=${capability.name}`, `CAPSULE_PROJECT_DIR=${PROJECT_MOUNT}`];
  // The container keeps --network none: its only way out is this socket to capsule's proxy.
  if (options.egressDir !== undefined) {
    mounts.push({ type: 'bind', source: options.egressDir, target: EGRESS_MOUNT, readOnly: true });
    env.push(`CAPSULE_EGRESS_SOCKET=${EGRESS_SOCKET}`);
  }
  for (const name of capability.manifest.grants.env) {
    const value = options.hostEnv[name];
    if (value !== undefined) env.push(`${name}=${value}`);
  }

  return {
    image: docker.image,
    // The image's entrypoint would run before (or instead of) the entry: capsule always runs the entry itself.
    entrypoint: options.watchdog !== undefined ? [...options.watchdog] : [],
    cmd: containerCommand(capability),
    workingDir: CAPABILITY_MOUNT,
    user: SANDBOX_USER,
    env,
    labels: options.labels,
    openStdin: true,
    runtime: docker.runtime,
    networkDisabled: docker.network !== 'host',
    networkMode: docker.network === 'host' ? 'host' : 'none',
    pidMode: docker.pidMode === 'host' ? 'host' : '',
    ipcMode: docker.ipcMode === 'host' ? 'host' : 'private',
    privileged: docker.privileged,
    readonlyRootfs: true,
    capDrop: ['ALL'],
    capAdd: docker.capAdd,
    securityOpt: ['no-new-privileges'],
    memoryBytes,
    // Equal to Memory: no swap, so a memory hog is OOM-killed instead of thrashing.
    memorySwapBytes: memoryBytes,
    // Under gVisor the cgroup counts the sandbox kernel's host threads (measured: 64 broke a shell
    // pipeline, 96 held), while guest processes live inside it: give the sandbox headroom on top.
    pidsLimit: docker.runtime === 'runsc' ? limits.pids + 128 : limits.pids,
    nanoCpus: Math.round(options.cpus * 1e9),
    ulimits: [
      { name: 'nofile', soft: 1024, hard: 1024 },
      { name: 'fsize', soft: 256 * 1024 * 1024, hard: 256 * 1024 * 1024 },
    ],
    tmpfs: { '/tmp': `rw,noexec,nosuid,nodev,size=${tmpfsMb}m,mode=1777` },
    mounts,
    logDriver: 'none',
  };
}
