import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** Every name src/index.ts exports, values and types: the library's public API. */
function exportedNames(): string[] {
  const file = path.resolve('src', 'index.ts');
  const program = ts.createProgram([file], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  if (source === undefined) throw new Error(`${file} not found`);
  const moduleSymbol = checker.getSymbolAtLocation(source);
  if (moduleSymbol === undefined) throw new Error(`${file} is not a module`);
  return checker
    .getExportsOfModule(moduleSymbol)
    .map((s) => s.getName())
    .sort();
}

describe('the public API (src/index.ts)', () => {
  it('exports what a library user needs to add a tool or a runner, and no internals', () => {
    // A change here is a change of capsule's library API: add a name deliberately, never by accident.
    expect(exportedNames()).toEqual(
      [
        'AgentSession',
        'AuditHeadRef',
        'AgentTool',
        'AgentToolContext',
        'CapabilityContext',
        'CapabilityStage',
        'Capability',
        'CapsuleError',
        'CapsuleMcpServer',
        'CompareReport',
        'ConfinedPath',
        'Decision',
        'DockerRunner',
        'Environment',
        'ErrorCode',
        'ErrorDetails',
        'Executor',
        'ExecutorOptions',
        'GateOptions',
        'InvalidCapability',
        'LoadedProjectConfig',
        'MANIFEST_FILE',
        'Manifest',
        'Permission',
        'DeclaredPermission',
        'PermissionEngine',
        'PermissionGate',
        'PermissionKey',
        'PermissionRequest',
        'PlannedVariant',
        'ProfileCatalog',
        'Registry',
        'RegistryOptions',
        'RunPermit',
        'RunRequest',
        'RunResult',
        'Runner',
        'Runtime',
        'RuntimeOptions',
        'ScanResult',
        'ShellRunner',
        'StateKey',
        'Telemetry',
        'Tool',
        'ToolCatalogOptions',
        'ToolContext',
        'ToolKind',
        'VariantPlan',
        'WasmRunner',
        'askHost',
        'auditHeadPath',
        'auditLogPath',
        'compareCapability',
        'componentizeJs',
        'confinedPaths',
        'createCommandParser',
        'createNonInteractivePrompter',
        'createTerminalPrompter',
        'createToolCatalog',
        'defineTool',
        'findProjectRoot',
        'isCapsuleError',
        'loadCapability',
        'loadProjectConfig',
        'makeKey',
        'manifestSchema',
        'askNone',
        'noTelemetry',
        'openAgentSession',
        // The project's audit log with its head: the engine no longer opens one itself (runtime/audit.ts).
        'openProjectAuditLog',
        'openRuntime',
        'otelTelemetry',
        'parseManifest',
        'protectedPaths',
        'runCases',
        'secretDir',
        'userCacheDir',
        'userStateDir',
        'verifyAuditLog',
      ].sort(),
    );
  });
});
