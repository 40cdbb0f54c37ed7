import path from 'node:path';
import type { Capability } from '../../manifest/types.js';
import { describeGrants } from '../../network/policy.js';

/**
 * What a docker capability's effective configuration means for isolation. A pure function of the
 * manifest and its resolved grants, so the permission layer can judge `sandboxed` before anything runs.
 */
export interface DockerIsolation {
  /** True only for the hardened profile with nothing that reaches the host. */
  sandboxed: boolean;
  /** Why it is not sandboxed (empty when sandboxed). */
  reasons: string[];
  /** Why the runner refuses to run it at all (empty when it may run). */
  refusals: Array<{ field: string; message: string }>;
  /**
   * How calls get their container: `fresh-container` (one per call, removed after it) or `reset-reusable`
   * (`docker.reusable`: one container serves many calls and is reset and verified between them; a
   * container whose reset cannot be verified is discarded).
   */
  mode: DockerMode;
  /** One line for `PermissionRequest.isolation` and `explain`. */
  summary: string;
}

export type DockerMode = 'fresh-container' | 'reset-reusable';

const MODE_TEXT: Record<DockerMode, string> = {
  'fresh-container': 'a fresh container per call',
  'reset-reusable':
    'reset-reusable: one container serves many calls, reset and verified between them (every process but its init killed; /tmp, /dev/shm, /dev/mqueue wiped; SysV IPC and unix sockets checked empty; discarded when the reset cannot be verified) by a keep-alive no call can signal, trace or write (PID 1 runs as root with only CAP_KILL, CAP_SETUID and CAP_SETGID; each call runs as uid 65534 in a session of its own with no capability and no-new-privileges)',
};

const SOCKET_NAMES = new Set(['docker.sock', 'containerd.sock', 'podman.sock', 'dockershim.sock']);
const HARDENED =
  'no network, read-only rootfs, all capabilities dropped, no-new-privileges, uid 65534, memory/pids/cpu limits, noexec tmpfs';

/** A granted path that is, or may contain, a container engine socket: access to it is root on the host. */
function engineSocketIn(hostPath: string): boolean {
  if (SOCKET_NAMES.has(path.basename(hostPath))) return true;
  const normalized = path.resolve(hostPath);
  return (
    normalized === '/' ||
    normalized === '/run' ||
    normalized === '/var/run' ||
    normalized === '/var' ||
    normalized === '/run/docker'
  );
}

export function dockerIsolation(capability: Pick<Capability, 'manifest' | 'fsGrants'>): DockerIsolation {
  const { manifest } = capability;
  const reasons: string[] = [];
  const refusals: DockerIsolation['refusals'] = [];
  if (manifest.environment !== 'docker' || manifest.docker === undefined) {
    return {
      sandboxed: false,
      reasons: ['not a docker capability'],
      refusals: [],
      mode: 'fresh-container',
      summary: 'docker: not a docker capability',
    };
  }
  const docker = manifest.docker;

  if (docker.privileged)
    reasons.push('privileged mode (docker.privileged) gives the container root on the host');
  if (docker.network === 'host') {
    reasons.push("host networking (docker.network = 'host') shares the host's network stack");
    refusals.push({
      field: 'docker.network',
      message:
        '"host" is not supported: it would bypass capsule\'s egress policy; remove it and grant hosts in grants.network',
    });
  }
  if (docker.pidMode === 'host')
    reasons.push("host PID namespace (docker.pidMode = 'host') sees and signals host processes");
  if (docker.ipcMode === 'host') reasons.push("host IPC namespace (docker.ipcMode = 'host')");
  if (docker.capAdd.length > 0)
    reasons.push(`added Linux capabilities (docker.capAdd: ${docker.capAdd.join(', ')})`);

  for (const [i, grant] of capability.fsGrants.entries()) {
    if (engineSocketIn(grant.hostPath)) {
      reasons.push(`grants.fs[${i}] ${grant.declared} exposes a container engine socket (root on the host)`);
      refusals.push({
        field: `grants.fs[${i}].path`,
        message: `${grant.declared} is or may contain a container engine socket; grant a narrower path`,
      });
    } else if (grant.mode === 'rw') {
      reasons.push(`writable host mount grants.fs[${i}] ${grant.declared} (rw)`);
    }
  }

  const runtime = docker.runtime === 'runsc' ? 'gVisor (runsc)' : 'runc';
  const sandboxed = reasons.length === 0;
  // The reset kills with `kill -9 -1` and checks SysV IPC: only inside the container's own PID and IPC
  // namespaces, and only where /proc/sysvipc exists (gVisor has none, so every check would fail). Otherwise
  // calls get fresh containers instead.
  const mode: DockerMode =
    docker.reusable &&
    // A run's egress proxy socket is mounted into its own container: never shared between calls.
    manifest.grants.network.length === 0 &&
    docker.pidMode !== 'host' &&
    docker.ipcMode !== 'host' &&
    docker.runtime !== 'runsc'
      ? 'reset-reusable'
      : 'fresh-container';
  // A network grant does not make it "not sandboxed" (capsule's proxy enforces it outside the container),
  // but the person must see the hosts wherever the isolation is shown.
  const egress =
    manifest.grants.network.length > 0
      ? `; its only way out: capsule's egress proxy to ${describeGrants(manifest.grants.network)}`
      : '';
  const summary = sandboxed
    ? `docker ${runtime}, hardened: ${HARDENED}${egress}; ${MODE_TEXT[mode]}`
    : `docker ${runtime}, NOT sandboxed: ${reasons.join('; ')}${egress}; ${MODE_TEXT[mode]}`;
  return { sandboxed, reasons, refusals, mode, summary };
}
