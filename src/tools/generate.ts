import { GENERATE_CAPABILITY, makeKey } from '../permissions/keys.js';
import type { Environment } from '../manifest/types.js';
import type { z } from 'zod';
import {
  dockerDraft,
  dockerParameters,
  shellDraft,
  shellParameters,
  wasmDraft,
  wasmParameters,
  type Draft,
} from './capability-drafts.js';
import { chooseRoot, installDraft } from './capability-install.js';
import { askHost, defineTool, type AgentTool } from './define.js';

/**
 * Key and subject are both the environment (`generate_capability:shell`), so rules name what gets
 * written — `generate_capability(shell)`, `generate_capability(sh*)`, or the tool, `generate_shell_capability`
 * — not the agent-chosen name, which says nothing about what will run. The name is in the prompt's text.
 */
function generateCheck(environment: Environment, name: string) {
  return askHost(
    makeKey(GENERATE_CAPABILITY, environment),
    environment,
    `writes the ${environment} capability folder "${name}" on the host (running it is asked separately)`,
  );
}

function generator<S extends z.ZodType>(
  name: string,
  environment: Environment,
  description: string,
  parameters: S,
  draftOf: (args: z.infer<S>) => Draft,
): AgentTool {
  return defineTool({
    name,
    description,
    kind: 'OTHER',
    parameters,
    async permission(args, ctx) {
      const draft = draftOf(args); // argument problems are reported before anyone is asked
      await chooseRoot(ctx, (args as { root?: string }).root, false);
      return generateCheck(environment, draft.name);
    },
    async execute(args, ctx) {
      const draft = draftOf(args);
      return installDraft(draft, args as { root?: string; overwrite: boolean }, ctx);
    },
  });
}

export function createGenerateShellCapabilityTool(): AgentTool {
  return generator(
    'generate_shell_capability',
    'shell',
    'Write a new shell capability (a script run as a host process: NOT a sandbox). Validated before it becomes visible.',
    shellParameters,
    shellDraft,
  );
}

export function createGenerateWasmCapabilityTool(): AgentTool {
  return generator(
    'generate_wasm_capability',
    'wasm',
    'Write a new Wasm capability from a JavaScript module exporting run(input: string): string (componentized now), or from a prebuilt .wasm.',
    wasmParameters,
    wasmDraft,
  );
}

export function createGenerateDockerCapabilityTool(): AgentTool {
  return generator(
    'generate_docker_capability',
    'docker',
    'Write a new Docker capability: a script run in a locked-down container (image from runtimes/docker or a named one).',
    dockerParameters,
    dockerDraft,
  );
}
