import type { Capability } from '../manifest/types.js';
import { dockerIsolation } from '../runners/docker/isolation.js';

export interface IsolationReport {
  /** Runs in a real sandbox (may reach the project allowlist). */
  sandboxed: boolean;
  /** One line saying what is enforced, or why it is not a sandbox. */
  summary: string;
}

/** Judged from the effective configuration at run time, never from a cached grant. */
export type IsolationJudge = (capability: Capability) => IsolationReport;

export function defaultIsolation(capability: Capability): IsolationReport {
  switch (capability.environment) {
    case 'shell':
      return {
        sandboxed: false,
        summary: 'shell: a host process (scrubbed env, time/output caps) — not a sandbox',
      };
    case 'wasm': {
      // Like a writable docker mount: what a rw grant writes lands on the host, so it is not contained.
      const writable = capability.fsGrants.filter((g) => g.mode === 'rw').map((g) => g.declared);
      if (writable.length > 0) {
        return {
          sandboxed: false,
          summary: `wasm: WebAssembly sandbox, but it writes to the host through rw grant(s) ${writable.join(', ')} — not sandboxed`,
        };
      }
      return { sandboxed: true, summary: 'wasm: WebAssembly sandbox, no network, only granted preopens' };
    }
    case 'docker': {
      // Privileged, host namespaces, added capabilities, rw host mounts: not sandboxed.
      const docker = dockerIsolation(capability);
      return { sandboxed: docker.sandboxed, summary: docker.summary };
    }
  }
}
