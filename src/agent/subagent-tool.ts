import { z } from 'zod';
import { CapsuleError } from '../base/errors.js';
import { defineTool, askNone, type AgentTool } from '../tools/define.js';

const MAX_CALLS = 50;

const runSubagentParameters = z.strictObject({
  task: z
    .string()
    .min(1)
    .max(10_000)
    .describe('What the sub-agent is asked to find out (recorded with its results).'),
  profile: z
    .string()
    .min(1)
    .max(64)
    .default('subagent')
    .describe('Profile of the sub-agent (default: the read-only subagent profile).'),
  grants: z
    .array(z.string().min(1))
    .max(64)
    .default([])
    .describe('Grants the sub-agent asks for; it receives only those this session also holds.'),
  calls: z
    .array(
      z.strictObject({
        tool: z.string().min(1).describe('Tool name; a sub-agent has only read-only tools.'),
        arguments: z.record(z.string(), z.unknown()).default({}).describe('Arguments of that tool.'),
      }),
    )
    .min(1)
    .max(MAX_CALLS)
    .describe('Tool calls the sub-agent makes, in order; each result (or error) is returned.'),
});

/**
 * run_subagent: a read-only child session runs a batch of tool calls (an analysis the parent wants
 * kept free of side effects). The child has only Permission::None tools and cannot spawn again.
 */
export function createRunSubagentTool(): AgentTool {
  return defineTool({
    name: 'run_subagent',
    description:
      'Delegate a read-only investigation to a sub-agent: it runs the given read-only tool calls and returns each result. Sub-agents cannot write, run, or spawn sub-agents.',
    kind: 'READ_ONLY',
    parameters: runSubagentParameters,
    async permission(args) {
      return askNone(args.profile);
    },
    async execute(args, ctx) {
      const child = await ctx.control.spawnSubAgent({ profile: args.profile, grants: args.grants });
      try {
        const results: Array<{ tool: string; ok: boolean; result?: unknown; error?: string }> = [];
        for (const call of args.calls) {
          if (ctx.signal?.aborted) throw new CapsuleError('CANCELED', 'run_subagent was canceled.');
          try {
            results.push({
              tool: call.tool,
              ok: true,
              result: await child.call(call.tool, call.arguments, { signal: ctx.signal }),
            });
          } catch (err) {
            results.push({
              tool: call.tool,
              ok: false,
              error: err instanceof Error ? err.message : String(err),
            });
          }
        }
        return { task: args.task, depth: child.depth, tools: child.toolNames(), results };
      } finally {
        await child.close();
      }
    },
  });
}
