import {
  createDescribeCapabilityTool,
  createListCapabilitiesTool,
  createRunCapabilityAgentTool,
} from './capability-tools.js';
import {
  createEnterPlanModeTool,
  createExitPlanModeTool,
  createReloadTool,
  createSleepTool,
} from './control-tools.js';
import { defineTool, type AgentTool } from './define.js';
import {
  createDiffTool,
  createEditFileTool,
  createGlobTool,
  createGrepTool,
  createReadFileTool,
  createWriteFileTool,
} from './file-tools.js';
import {
  createGenerateDockerCapabilityTool,
  createGenerateShellCapabilityTool,
  createGenerateWasmCapabilityTool,
} from './generate.js';
import { createRunCommandTool } from './run-command.js';

/**
 * The tools with Permission::None for every argument: the only ones a read-only sub-agent gets
 * (docs/mcp.md, "Sub-agents"). run_subagent is not among them: a child can never create a grandchild.
 * Narrower than `kind: 'READ_ONLY'` (what a mode allows): the control tools are READ_ONLY for the
 * modes but change the session (its mode, a reload), which a read-only child must not.
 * They come first in the catalog.
 */
const READ_ONLY_NAMES = [
  'read_file',
  'glob',
  'grep',
  'diff',
  'list_capabilities',
  'describe_capability',
] as const;

/** Every tool name of the catalog, in the order tools/list shows them. */
export const TOOL_NAMES = [
  ...READ_ONLY_NAMES,
  'write_file',
  'edit_file',
  'run_command',
  'generate_shell_capability',
  'generate_wasm_capability',
  'generate_docker_capability',
  'run_capability',
  'learn_capability',
  'enter_plan_mode',
  'exit_plan_mode',
  'sleep',
  'reload',
  'run_subagent',
] as const;

export type ToolName = (typeof TOOL_NAMES)[number];

export function isToolName(name: string): name is ToolName {
  return (TOOL_NAMES as readonly string[]).includes(name);
}

export const READ_ONLY_TOOL_NAMES: readonly ToolName[] = READ_ONLY_NAMES;

export interface ToolCatalogOptions {
  /** capsule's own environment (run_command passes bash the harmless part of it). */
  env: NodeJS.ProcessEnv;
}

/**
 * A fresh catalog of the built-in tools (run_subagent and learn_capability are added by the agent session
 * that owns them).
 */
export function createToolCatalog(options: ToolCatalogOptions): AgentTool[] {
  return [
    createReadFileTool(),
    createGlobTool(),
    createGrepTool(),
    createDiffTool(),
    createListCapabilitiesTool(),
    createDescribeCapabilityTool(),
    createWriteFileTool(),
    createEditFileTool(),
    defineTool(createRunCommandTool({ env: options.env })),
    createGenerateShellCapabilityTool(),
    createGenerateWasmCapabilityTool(),
    createGenerateDockerCapabilityTool(),
    createRunCapabilityAgentTool(),
    createEnterPlanModeTool(),
    createExitPlanModeTool(),
    createSleepTool(),
    createReloadTool(),
  ];
}
