import type { Capability } from '../manifest/types.js';

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
    case 'wasm':
      return { sandboxed: true, summary: 'wasm: WebAssembly sandbox, no network, only granted preopens' };
    case 'docker':
      // Until the docker runner reports the effective profile, fail closed: not sandboxed.
      return {
        sandboxed: false,
        summary: 'docker: isolation profile not verified — treated as not sandboxed',
      };
  }
}
