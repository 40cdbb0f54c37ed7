import type { ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import type { IsolationReport } from '../executor/isolation.js';
import type { Capability } from '../manifest/types.js';
import type { ToolName } from '../tools/catalog.js';

// MCP tool annotations are hints a client shows or acts on (auto-approve read-only tools, warn before
// destructive ones). capsule never relies on them: every call still goes through the gate.

const READ: Omit<ToolAnnotations, 'title'> = {
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
};

/** Hints for every built-in tool; a Record over ToolName so a new tool cannot be served without them. */
export const TOOL_ANNOTATIONS: Record<ToolName, ToolAnnotations> = {
  read_file: { title: 'Read a file', ...READ },
  glob: { title: 'Find files by glob', ...READ },
  grep: { title: 'Search files', ...READ },
  diff: { title: 'Diff two files', ...READ },
  list_capabilities: { title: 'List capabilities', ...READ },
  describe_capability: { title: 'Describe a capability', ...READ },
  write_file: {
    title: 'Write a file',
    readOnlyHint: false,
    // It replaces a file's content; writing the same content again changes nothing more.
    destructiveHint: true,
    idempotentHint: true,
    openWorldHint: false,
  },
  edit_file: {
    title: 'Edit a file',
    readOnlyHint: false,
    destructiveHint: true,
    // A second identical replacement no longer finds its old text.
    idempotentHint: false,
    openWorldHint: false,
  },
  run_command: {
    title: 'Run a host command',
    readOnlyHint: false,
    destructiveHint: true,
    idempotentHint: false,
    // A host process reaches whatever the user can: the network, other files.
    openWorldHint: true,
  },
  generate_shell_capability: {
    title: 'Write a shell capability',
    readOnlyHint: false,
    // overwrite: true replaces an existing capability folder.
    destructiveHint: true,
    idempotentHint: false,
    openWorldHint: false,
  },
  generate_wasm_capability: {
    title: 'Write a Wasm capability',
    readOnlyHint: false,
    destructiveHint: true,
    idempotentHint: false,
    openWorldHint: false,
  },
  generate_docker_capability: {
    title: 'Write a Docker capability',
    readOnlyHint: false,
    destructiveHint: true,
    idempotentHint: false,
    openWorldHint: false,
  },
  run_capability: {
    title: 'Run a capability by name',
    readOnlyHint: false,
    destructiveHint: true,
    idempotentHint: false,
    // Any capability, shell ones included: a host process. Each capability's own tool says more.
    openWorldHint: true,
  },
  learn_capability: {
    title: 'Learn, prove and (on a yes) write the grants a capability needs',
    readOnlyHint: false,
    // It runs the capability (a host process for a shell one) and, on a person's yes, writes a manifest.
    destructiveHint: true,
    idempotentHint: false,
    openWorldHint: true,
  },
  enter_plan_mode: {
    title: 'Enter plan mode',
    // It changes the session's mode, not the project.
    readOnlyHint: false,
    destructiveHint: false,
    idempotentHint: true,
    openWorldHint: false,
  },
  exit_plan_mode: {
    title: 'Ask to leave plan mode',
    readOnlyHint: false,
    destructiveHint: false,
    idempotentHint: false,
    openWorldHint: false,
  },
  sleep: { title: 'Wait', ...READ },
  reload: {
    title: 'Reload the registry and policy',
    // A policy change a person adopts changes the session.
    readOnlyHint: false,
    destructiveHint: false,
    idempotentHint: true,
    openWorldHint: false,
  },
  run_subagent: { title: 'Run a read-only sub-agent', ...READ },
};

/** Whether a capability's grants or settings give it the network (docker `network: host` included). */
function reachesNetwork(capability: Capability): boolean {
  return capability.manifest.grants.network.length > 0 || capability.manifest.docker?.network === 'host';
}

/**
 * Pure: the hints of one capability's tool. Open world only for shell capabilities (a host process)
 * and network-granted ones; read-only only for a sandboxed run with no write grant and no network.
 */
export function capabilityAnnotations(capability: Capability, isolation: IsolationReport): ToolAnnotations {
  const network = reachesNetwork(capability);
  const writes = capability.fsGrants.some((g) => g.mode === 'rw');
  const readOnly = isolation.sandboxed && capability.environment !== 'shell' && !writes && !network;
  return {
    title: `${capability.name} (${capability.environment} capability)`,
    readOnlyHint: readOnly,
    destructiveHint: !readOnly,
    idempotentHint: readOnly,
    openWorldHint: capability.environment === 'shell' || network,
  };
}
