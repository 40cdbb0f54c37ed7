import { z } from 'zod';
import type { Executor } from '../executor/executor.js';
import type { IsolationReport } from '../executor/isolation.js';
import type { Capability } from '../manifest/types.js';
import { capabilityKey } from '../tools/run-capability.js';
import type { Tool } from '../tools/tool.js';

/**
 * One gate decision for running `capability` in several environments (compare, ci --env): the key is
 * run_capability:<name>, judged by the least isolated variant and bound to the hash of exactly the
 * capability object that will run. Throws PERMISSION_DENIED like any tool call.
 */
export async function authorizeVariants(
  executor: Executor,
  capability: Capability,
  isolations: readonly IsolationReport[],
  signal?: AbortSignal,
): Promise<void> {
  const weakest = isolations.find((i) => !i.sandboxed) ?? isolations[0];
  const tool: Tool<z.ZodType, void> = {
    name: 'run_capability',
    description: 'Run one capability in several environments.',
    kind: 'OTHER',
    parameters: z.strictObject({ name: z.string() }),
    async permission() {
      return {
        permission: capabilityKey(capability.name),
        subject: capability.name,
        sandboxed: isolations.length > 0 && isolations.every((i) => i.sandboxed),
        isolation: weakest?.summary,
        contentHash: capability.contentHash,
      };
    },
    async execute() {},
  };
  await executor.call(tool, { name: capability.name }, { signal });
}
