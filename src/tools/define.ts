import type { z } from 'zod';
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
