import type { z } from 'zod';
import type { Permission, ToolKind } from '../permissions/types.js';

/** What a tool can reach while it runs; built by the executor for one session. */
export interface ToolContext {
  signal?: AbortSignal | undefined;
}

/**
 * A tool: permission() is evaluated before execute(); a denied call never reaches execute().
 * Parameters are a zod schema so MCP, the CLI and tests share one validation.
 */
export interface Tool<
  Schema extends z.ZodType = z.ZodType,
  Result = unknown,
  Ctx extends ToolContext = ToolContext,
> {
  readonly name: string;
  readonly description: string;
  readonly kind: ToolKind;
  readonly parameters: Schema;
  permission(args: z.infer<Schema>, context: Ctx): Promise<PermissionCheck>;
  execute(args: z.infer<Schema>, context: Ctx): Promise<Result>;
}

/** permission() result: the declared Permission plus what the gate needs to judge it. */
export interface PermissionCheck {
  permission: Permission;
  subject: string;
  sandboxed: boolean;
  isolation?: string | undefined;
  contentHash?: string | undefined;
  /** run_command: every simple command inside a compound one (deny rules match each part). */
  parts?: readonly string[] | undefined;
}
