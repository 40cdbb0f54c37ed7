import type { IsolationReport } from '../executor/isolation.js';
import type { Capability } from '../manifest/types.js';
import type { RunPermit } from '../executor/executor.js';
import type { RunResult } from '../runners/types.js';
import type { ToolContext } from './tool.js';

/** What capability tools can reach; the executor builds it for one call. */
export interface CapabilityContext extends ToolContext {
  /** Resolve a capability afresh and stage its bytes (once per call and name): what the gate judges is what runs. */
  prepareCapability(name: string): Promise<Capability>;
  isolation(capability: Capability): IsolationReport;
  validateInput(capability: Capability, inputText: string): string;
  /** Runs a capability prepared in this call, with the permit the executor issued once the gate allowed. */
  runApproved(
    permit: RunPermit | undefined,
    capability: Capability,
    inputText: string,
    signal?: AbortSignal,
  ): Promise<RunResult>;
  /** Set by the executor for execute(), only after the gate allowed this call's Ask. */
  permit?: RunPermit | undefined;
}
