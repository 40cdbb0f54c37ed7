import type { PermissionMode } from '../project/project-config.js';
import type { Capability } from '../manifest/types.js';
import type { CommandParser } from '../permissions/commands/parser.js';
import type { Registry } from '../registry/registry.js';
import type { HostConfinement } from '../runners/host/confinement.js';
import type { RunResult } from '../runners/types.js';
import type { ToolContext } from './tool.js';
import type { Workspace } from './workspace.js';

/*
 * The ports of the tools: what a tool can reach while it runs, declared here where the tools use it
 * and implemented by those that run them (the executor: CapabilityContext; the agent session:
 * SessionControl, SubAgent; the Wasm runner: Componentize). Types only, so every part above points
 * here and nothing here points up.
 */

/** What the isolation judge says about a capability (src/executor/isolation.ts judges it). */
export interface IsolationReport {
  /** Runs in a real sandbox (may reach the project allowlist). */
  sandboxed: boolean;
  /** One line saying what is enforced, or why it is not a sandbox. */
  summary: string;
  /** Shell only: what the probe measured on this machine (absent when it was not measured). */
  confinement?: HostConfinement | undefined;
}

/**
 * Proof that the gate allowed running some staged capabilities. Only the executor creates one (after
 * the gate said allow) and only the executor that created it accepts it: a look-alike object, or a
 * permit used after its call ended or its plan was released, runs nothing.
 */
export interface RunPermit {
  readonly capability: string;
  readonly contentHash: string;
  readonly key: string;
}

/**
 * JS module source (exporting `run(input: string): string`) → a Wasm component. Provided by the Wasm
 * runner; injected so generate_wasm_capability does not depend on how it is built.
 */
export type Componentize = (
  source: string,
  options: { signal?: AbortSignal | undefined; onProgress?: ((message: string) => void) | undefined },
) => Promise<Uint8Array>;

/** What capability tools can reach; the executor builds it for one call. */
export interface CapabilityContext extends ToolContext {
  /** Resolve a capability afresh and stage its bytes (once per call and name): what the gate judges is what runs. */
  prepareCapability(name: string): Promise<Capability>;
  isolation(capability: Capability): IsolationReport;
  validateInput(capability: Capability, inputText: string): Promise<string>;
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

/** Progress of long work (componentizing, image builds); MCP turns it into progress notifications. */
export type ProgressReporter = (progress: { message: string; progress: number; total?: number }) => void;

/** What the reload tool reports: the registry counts and what happened to the policy. */
export interface ReloadSummary {
  capabilities: number;
  invalid: number;
  allowlistEntries: number;
  policy: { changed: boolean; applied: boolean; diff: string[]; message: string };
}

/** A child session as the run_subagent tool sees it. */
export interface SubAgent {
  readonly depth: number;
  toolNames(): string[];
  call(name: string, args: unknown, options?: { signal?: AbortSignal | undefined }): Promise<unknown>;
  close(): Promise<void>;
}

/** What the plan-mode tools and sub-agent tool change: the session they run in. */
export interface SessionControl {
  readonly mode: PermissionMode;
  setMode(mode: PermissionMode): void;
  /** Ask the human to approve a plan (MCP: an elicitation). Resolves to their verdict. */
  approvePlan(
    plan: string,
    signal?: AbortSignal,
  ): Promise<{ approved: boolean; feedback?: string | undefined }>;
  /** A read-only child session (run_subagent); refused at depth 1. */
  spawnSubAgent(options: {
    profile?: string | undefined;
    grants?: readonly string[] | undefined;
  }): Promise<SubAgent>;
  /** Re-read the registry; a changed policy takes effect only when a person confirms it. */
  reload(signal?: AbortSignal): Promise<ReloadSummary>;
}

/** Everything the agent tools can reach while they run; one per session, plus the call's signal. */
export interface AgentToolContext extends CapabilityContext {
  workspace: Workspace;
  /** Real paths no tool may write (capsule.json, the .capsule state folder); the loader checks grants against them. */
  protectedPaths: readonly string[];
  registry: Registry;
  /** The permission engine's bash parser (run_command keying). */
  commands: CommandParser;
  control: SessionControl;
  /** JS → Wasm component, from the Wasm runner; undefined when it is not available here. */
  componentize?: Componentize | undefined;
  progress?: ProgressReporter | undefined;
  /** Cap for sleep(seconds). */
  sleepMaxSeconds: number;
}
