import { z } from 'zod';
import { inputDocumentText } from '../manifest/input.js';

import type { RunResult } from '../runners/types.js';
import type { DeclaredPermission, Tool } from './tool.js';
import type { CapabilityContext } from './ports.js';

export const runCapabilityParameters = z.strictObject({
  name: z.string().min(1).max(64).describe('Capability name, as listed by list_capabilities.'),
  input: z
    .unknown()
    .optional()
    .describe('Input document (any JSON value; validated against the capability input schema). Default {}.'),
});

export type RunCapabilityArgs = z.infer<typeof runCapabilityParameters>;

export function capabilityKey(name: string): DeclaredPermission['permission'] {
  return {
    type: 'ask',
    key: { tool: 'run_capability', action: name, raw: `run_capability:${name}`, compound: false },
  };
}

/**
 * run_capability: resolves and stages the capability afresh, validates the input, and runs the staged
 * copy the gate judged (its content hash is the one asked about and audited) in its environment.
 */
export function createRunCapabilityTool(): Tool<
  typeof runCapabilityParameters,
  RunResult,
  CapabilityContext
> {
  return {
    name: 'run_capability',
    description:
      'Run a capability by name with a JSON input; returns exit code, stdout, stderr and limit flags.',
    kind: 'OTHER',
    parameters: runCapabilityParameters,
    async permission(args, ctx) {
      const capability = await ctx.prepareCapability(args.name);
      const isolation = ctx.isolation(capability);
      return {
        permission: capabilityKey(capability.name),
        subject: capability.name,
        sandboxed: isolation.sandboxed,
        isolation: isolation.summary,
        contentHash: capability.contentHash,
      };
    },
    async execute(args, ctx) {
      // The same staged object permission() judged (one preparation per call and name).
      const capability = await ctx.prepareCapability(args.name);
      const inputText = await ctx.validateInput(capability, inputDocumentText(args.input ?? {}));
      return ctx.runApproved(ctx.permit, capability, inputText, ctx.signal);
    },
  };
}
