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
import { installDraft, planInstall, type InstallPlan } from './capability-install.js';
import { askHost, defineTool, type AgentTool } from './define.js';
import type { DeclaredPermission } from '../permissions/types.js';
import type { AgentToolContext } from './ports.js';

/**
 * A new folder: key and subject are both the environment (`generate_capability:shell`), so rules name
 * what gets written — `generate_capability(shell)`, `generate_capability(sh*)`, or the tool,
 * `generate_shell_capability` — not the agent-chosen name, which says nothing about what will run. The
 * name is in the prompt's text. A replacement asks under its own key,
 * `generate_capability:<env>:replace:<name>`, bound to the replaced capability's content hash: a grant
 * to write new capabilities never covers deleting one, and a yes for this session covers replacing
 * only the content the person was shown.
 */
function generateCheck(
  environment: Environment,
  plan: InstallPlan,
  ctx: AgentToolContext,
): DeclaredPermission {
  const where = ctx.workspace.relativeOf(plan.target);
  if (plan.replaces === undefined) {
    return askHost(
      makeKey(GENERATE_CAPABILITY, environment),
      environment,
      `writes the new ${environment} capability folder "${plan.name}" (${where}) on the host (running it is asked separately)`,
    );
  }
  return {
    ...askHost(
      makeKey(GENERATE_CAPABILITY, `${environment}:replace:${plan.name}`),
      environment,
      `REPLACES the capability "${plan.name}" at ${where} (content ${plan.replaces.contentHash}): that folder is deleted and a new ${environment} capability written in its place on the host (running it is asked separately)`,
    ),
    contentHash: plan.replaces.contentHash,
  };
}

function generator<S extends z.ZodType>(
  name: string,
  environment: Environment,
  description: string,
  parameters: S,
  draftOf: (args: z.infer<S>) => Draft,
): AgentTool {
  // What permission() planned (and the prompt showed) for this call: execute() installs only that.
  const shown = new WeakMap<object, InstallPlan>();
  return defineTool({
    name,
    description,
    kind: 'OTHER',
    parameters,
    async permission(args, ctx) {
      const draft = draftOf(args); // argument problems are reported before anyone is asked
      // Every check on the target folder, too: a refusal is given before anyone is asked.
      const plan = await planInstall(ctx, draft.name, args as { root?: string; overwrite: boolean });
      shown.set(ctx, plan);
      return generateCheck(environment, plan, ctx);
    },
    async execute(args, ctx) {
      const draft = draftOf(args);
      const installArgs = args as { root?: string; overwrite: boolean };
      // Without a plan from permission() (a caller that skipped the gate), nothing may be replaced.
      const plan = shown.get(ctx) ?? {
        ...(await planInstall(ctx, draft.name, installArgs)),
        replaces: undefined,
      };
      return installDraft(draft, installArgs, ctx, plan);
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
