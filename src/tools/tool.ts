import type { z } from 'zod';
import type { DeclaredPermission, ToolKind } from '../permissions/types.js';

export type { DeclaredPermission };

/** What a tool can reach while it runs; built by the executor for one session. */
export interface ToolContext {
  signal?: AbortSignal | undefined;
  /** The caller's id of this call (an MCP request id), for telemetry. */
  callId?: string | undefined;
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
  /** The shape of its result, when it has one (MCP: the tool's outputSchema, the result its structuredContent). */
  readonly output?: z.ZodType | undefined;
  permission(args: z.infer<Schema>, context: Ctx): Promise<DeclaredPermission>;
  execute(args: z.infer<Schema>, context: Ctx): Promise<Result>;
}
