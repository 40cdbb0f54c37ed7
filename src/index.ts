/**
 * capsule's library API: every part is constructed explicitly (no module-level state). openRuntime is
 * the composition root the CLI and the MCP server use too (real-path project root, canonical grants,
 * the protected set, the environment runners read):
 *
 *   const runtime = await openRuntime({ cwd: process.cwd(), grants: ['run_capability:hello'] });
 *   const executor = runtime.openExecutor(await runtime.openGate({ prompter: createNonInteractivePrompter() }));
 *   const { result } = await executor.run('hello', { name: 'world' });
 *   await executor.close();
 */
export { CapsuleError, isCapsuleError, type ErrorCode, type ErrorDetails } from './base/errors.js';

export { manifestSchema, type Manifest } from './manifest/schema.js';
export { MANIFEST_FILE } from './project/environments.js';
export { parseManifest } from './manifest/parse.js';
export { loadCapability } from './manifest/load.js';
export type { Capability, Environment, InvalidCapability } from './manifest/types.js';
export { Registry, type RegistryOptions, type ScanResult } from './registry/registry.js';
export { loadProjectConfig, findProjectRoot, type LoadedProjectConfig } from './project/project-config.js';
export { userCacheDir } from './base/cache-dir.js';
export { confinedPaths, protectedPaths, type ConfinedPath } from './project/protected-state.js';

// Adding a runner: implement Runner (run a Capability's environment, return the one RunResult shape); its
// run() starts with redeemPermit(permit, request.capability), as capsule's own runners do. Only the executor
// mints permits, so the concrete runners are not exported: a capability runs through executor.run.
export type { Runner, RunRequest, RunResult } from './runners/types.js';
export { redeemPermit, type RunnerPermit } from './runners/permit.js';
export { componentizeJs } from './runners/wasm/componentize.js';

export type {
  PermissionGate,
  PermissionRequest,
  DeclaredPermission,
  PermissionKey,
  Decision,
  ToolKind,
  Permission,
} from './permissions/types.js';
export { makeKey } from './permissions/keys.js';
export { PermissionEngine } from './permissions/engine.js';
export { createCommandParser } from './permissions/commands/parser.js';
export { createNonInteractivePrompter, createTerminalPrompter } from './permissions/prompter.js';
export { verifyAuditLog } from './permissions/audit/verify.js';
export type { AuditHeadRef } from './permissions/audit/head.js';
export { auditHeadPath, auditLogPath } from './project/audit-paths.js';
export { secretDir, userStateDir } from './base/user-state.js';
export { StateKey } from './project/state-key.js';
export { openProjectAuditLog } from './runtime/audit.js';

// Adding a tool: defineTool with a zod schema, permission() (askNone or askHost with a makeKey key)
// and execute(ctx); run it with executor.call(tool, args, context).
export type { Tool, ToolContext } from './tools/tool.js';
export type { CapabilityContext, AgentToolContext } from './tools/ports.js';
export { defineTool, askNone, askHost, type AgentTool } from './tools/define.js';
export { createToolCatalog, type ToolCatalogOptions } from './tools/catalog.js';
export {
  Executor,
  type ExecutorOptions,
  type RunPermit,
  type VariantPlan,
  type PlannedVariant,
} from './executor/executor.js';
export { CapabilityStage } from './executor/stage.js';
export { openRuntime, type Runtime, type RuntimeOptions, type GateOptions } from './runtime/runtime.js';

export { AgentSession } from './agent/agent-session.js';
export { openAgentSession } from './agent/open-session.js';
export { ProfileCatalog } from './agent/profile.js';
export { CapsuleMcpServer } from './mcp/server.js';

export { compareCapability, type CompareReport } from './compare/compare.js';
export { runCases } from './ci/run-cases.js';
export { noTelemetry, otelTelemetry, type Telemetry } from './telemetry/telemetry.js';
