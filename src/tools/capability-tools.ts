import { z } from 'zod';
import { askNone, defineNoArgumentTool, defineTool, type AgentTool } from './define.js';
import { createRunCapabilityTool } from './run-capability.js';
import type { Capability } from '../manifest/types.js';
import type { AgentToolContext } from './ports.js';

/** What agents are told about a capability: where it is, its hash, and how isolated it runs. */
export function capabilitySummary(c: Capability, ctx: Pick<AgentToolContext, 'isolation' | 'workspace'>) {
  const isolation = ctx.isolation(c);
  return {
    name: c.name,
    environment: c.environment,
    dir: ctx.workspace.relativeOf(c.dir),
    contentHash: c.contentHash,
    sandboxed: isolation.sandboxed,
    isolation: isolation.summary,
  };
}

export function createListCapabilitiesTool(): AgentTool {
  return defineNoArgumentTool({
    name: 'list_capabilities',
    description:
      'List the capabilities in the registry (read afresh), and the invalid folders with the reason.',
    subject: '*',
    async execute(ctx) {
      const scan = await ctx.registry.scan();
      return {
        capabilities: scan.capabilities.map((c) => ({
          name: c.name,
          description: c.manifest.description,
          environment: c.environment,
          sandboxed: ctx.isolation(c).sandboxed,
          contentHash: c.contentHash,
        })),
        invalid: scan.invalid.map((i) => ({ folder: i.folder, issues: i.issues })),
      };
    },
  });
}

export function createDescribeCapabilityTool(): AgentTool {
  return defineTool({
    name: 'describe_capability',
    description:
      'Show one capability: its manifest (input schema, limits, grants), content hash and isolation.',
    kind: 'READ_ONLY',
    parameters: z.strictObject({
      name: z.string().min(1).max(64).describe('Capability name, as listed by list_capabilities.'),
    }),
    async permission(args) {
      return askNone(args.name);
    },
    async execute(args, ctx) {
      const c = await ctx.registry.get(args.name);
      return {
        ...capabilitySummary(c, ctx),
        permissionKey: `run_capability:${c.name}`,
        manifest: c.manifest,
      };
    },
  });
}

/** run_capability, widened to the catalog's tool type (its behaviour lives in run-capability.ts). */
export function createRunCapabilityAgentTool(): AgentTool {
  return defineTool(createRunCapabilityTool());
}
