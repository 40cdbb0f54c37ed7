import { z } from 'zod';
import type { PermissionKey } from '../permissions/types.js';
import type { AgentToolContext } from './ports.js';
import type { DeclaredPermission, Tool } from './tool.js';

/** A tool of the agent catalog, as the catalog and the MCP server hold it. */
export type AgentTool = Tool<z.ZodType, unknown, AgentToolContext>;

/** Typed construction of one tool (the catalog stores it widened). */
export function defineTool<S extends z.ZodType, R>(tool: Tool<S, R, AgentToolContext>): AgentTool {
  return tool as unknown as AgentTool;
}

/** Permission::None: read-only tools never reach the gate. */
export function askNone(subject: string): DeclaredPermission {
  return { permission: { type: 'none' }, subject, sandboxed: true };
}

/** Permission::Ask(key) for work that runs on the host (its ceiling is the session allowlist). */
export function askHost(key: PermissionKey, subject: string, isolation: string): DeclaredPermission {
  return { permission: { type: 'ask', key }, subject, sandboxed: false, isolation };
}

/**
 * A READ_ONLY tool that takes no arguments and never reaches the gate (Permission::None on `subject`):
 * list_capabilities, enter_plan_mode and reload differ only in what they do.
 */
export function defineNoArgumentTool<R>(tool: {
  name: string;
  description: string;
  subject: string;
  execute(ctx: AgentToolContext): Promise<R>;
}): AgentTool {
  return defineTool({
    name: tool.name,
    description: tool.description,
    kind: 'READ_ONLY',
    parameters: z.strictObject({}),
    async permission() {
      return askNone(tool.subject);
    },
    async execute(_args, ctx) {
      return tool.execute(ctx);
    },
  });
}
