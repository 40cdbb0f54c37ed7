import type { Capability } from '../manifest/types.js';
import { describeGrants } from '../network/policy.js';
import { dockerIsolation } from '../runners/docker/isolation.js';
import { describeConfinement, type HostConfinement } from '../runners/host/confinement.js';
import type { IsolationReport } from '../tools/ports.js';

export type { IsolationReport };

/** Judged from the effective configuration at run time, never from a cached grant. */
export type IsolationJudge = (capability: Capability) => IsolationReport;

/**
 * `hostConfinement` is what the shell runner measured on this machine; without it the shell line says
 * only what holds everywhere.
 */
export function defaultIsolation(capability: Capability, hostConfinement?: HostConfinement): IsolationReport {
  const report = environmentIsolation(capability, hostConfinement);
  // Granted host variables are capsule's own environment handed to the capability (tokens, keys): a
  // repository file must not be able to decide that alone, so such a capability is never "sandboxed".
  const env = capability.manifest.grants.env;
  if (!report.sandboxed || env.length === 0) return report;
  return {
    ...report,
    sandboxed: false,
    summary: `${report.summary}, but it is given host variable(s) ${env.join(', ')} — not sandboxed`,
  };
}

function environmentIsolation(capability: Capability, hostConfinement?: HostConfinement): IsolationReport {
  switch (capability.environment) {
    case 'shell': {
      // Never a sandbox (it reads and writes the host as the user running capsule), whatever was measured.
      // grants.network binds nothing here: say so, so nobody reads the hosts as a limit.
      const base =
        capability.manifest.grants.network.length > 0
          ? 'shell: a host process (scrubbed env, time/output caps) — not a sandbox; grants.network is not enforced (it has the whole network)'
          : 'shell: a host process (scrubbed env, time/output caps) — not a sandbox';
      if (hostConfinement === undefined)
        return { sandboxed: false, summary: `${base}; confinement not measured` };
      const { tools: _tools, cgroup: _cgroup, ...measured } = hostConfinement;
      return {
        sandboxed: false,
        summary: `${base}; here: ${describeConfinement(hostConfinement)}`,
        confinement: measured,
      };
    }
    case 'wasm': {
      // Like a writable docker mount: what a rw grant writes lands on the host, so it is not contained.
      const writable = capability.fsGrants.filter((g) => g.mode === 'rw').map((g) => g.declared);
      if (writable.length > 0) {
        return {
          sandboxed: false,
          summary: `wasm: WebAssembly sandbox, but it writes to the host through rw grant(s) ${writable.join(', ')} — not sandboxed`,
        };
      }
      const network = capability.manifest.grants.network;
      return {
        sandboxed: true,
        summary:
          network.length > 0
            ? `wasm: WebAssembly sandbox, only granted preopens; HTTP only through capsule's host to ${describeGrants(network)}`
            : 'wasm: WebAssembly sandbox, no network, only granted preopens',
      };
    }
    case 'docker': {
      // Privileged, host namespaces, added capabilities, rw host mounts: not sandboxed.
      const docker = dockerIsolation(capability);
      return { sandboxed: docker.sandboxed, summary: docker.summary };
    }
  }
}
