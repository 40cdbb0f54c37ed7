import type { IsolationReport } from '../executor/isolation.js';
import type { Capability } from '../manifest/types.js';
import type { RunResult } from '../runners/types.js';
import type { ToolContext } from './tool.js';

/** What capability tools can reach; the executor implements it for one session. */
export interface CapabilityContext extends ToolContext {
  resolveCapability(name: string): Promise<Capability>;
  isolation(capability: Capability): IsolationReport;
  validateInput(capability: Capability, inputText: string): string;
  runCapability(capability: Capability, inputText: string, signal?: AbortSignal): Promise<RunResult>;
}
