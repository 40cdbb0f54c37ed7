import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult,
  type Tool as McpTool,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { AgentSession, PlanApproval } from '../agent/agent-session.js';
import type { WriteConfirmer } from '../agent/learn-tool.js';
import { CapsuleError } from '../base/errors.js';
import type { PolicyConfirmer } from '../permissions/policy-diff.js';
import type { Prompter } from '../permissions/prompter.js';
import type { ProgressReporter } from '../tools/ports.js';
import type { Capability } from '../manifest/types.js';
import type { IsolationReport } from '../executor/isolation.js';
import type { RunResult } from '../runners/types.js';
import type { ToolName } from '../tools/catalog.js';
import type { AgentTool } from '../tools/define.js';
import { capabilityAnnotations, TOOL_ANNOTATIONS } from './tool-annotations.js';
import {
  agentDenialText,
  clientCanElicit,
  createElicitationPlanApproval,
  createElicitationPolicyConfirmer,
  createElicitationPrompter,
  createElicitationWriteConfirmer,
} from './elicitation.js';

export const MCP_SERVER_NAME = 'capsule';

/** The hooks a session needs from the MCP side: who answers Asks, plan approvals and policy changes. */
export interface McpHumanHooks {
  prompter: Prompter;
  approvePlan: PlanApproval;
  confirmPolicy: PolicyConfirmer;
  /** Who says yes before learn_capability writes grants. */
  confirmWrite: WriteConfirmer;
}

export interface CapsuleMcpServerOptions {
  version: string;
  /** Builds the session once the hooks exist (the prompter needs the server to send elicitations). */
  openSession: (hooks: McpHumanHooks) => Promise<AgentSession>;
}

/** Pure: the MCP description of one tool (JSON Schema of its zod parameters, its annotations). */
export function mcpToolOf(tool: AgentTool): McpTool {
  const schema = z.toJSONSchema(tool.parameters, { io: 'input', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  delete schema.$schema;
  let outputSchema: McpTool['outputSchema'];
  if (tool.output !== undefined) {
    const output = z.toJSONSchema(tool.output, { io: 'output', unrepresentable: 'any' }) as Record<
      string,
      unknown
    >;
    delete output.$schema;
    outputSchema = { ...output, type: 'object' } as McpTool['outputSchema'];
  }
  const annotations = TOOL_ANNOTATIONS[tool.name as ToolName];
  return {
    name: tool.name,
    ...(annotations?.title !== undefined ? { title: annotations.title } : {}),
    description: `${tool.description} [${tool.kind === 'READ_ONLY' ? 'read-only, no permission needed' : 'asks permission'}]`,
    inputSchema: { ...schema, type: 'object' } as McpTool['inputSchema'],
    ...(outputSchema !== undefined ? { outputSchema } : {}),
    // A tool without an entry (none today) is described as the most dangerous kind.
    annotations: annotations ?? {
      readOnlyHint: false,
      destructiveHint: true,
      idempotentHint: false,
      openWorldHint: true,
    },
  };
}

/** Each capability is also served as its own tool, named with this prefix (no built-in starts so). */
export const CAPABILITY_TOOL_PREFIX = 'cap_';

/** The capability a tool name serves, or undefined for a built-in tool's name. */
export function capabilityOfToolName(name: string): string | undefined {
  return name.startsWith(CAPABILITY_TOOL_PREFIX) ? name.slice(CAPABILITY_TOOL_PREFIX.length) : undefined;
}

/** Whether a capability's input schema is served as is (MCP tool inputs are objects) or wrapped. */
function objectInput(capability: Capability): boolean {
  return capability.manifest.inputSchema.type === 'object';
}

/**
 * Pure: one capability as an MCP tool. Its arguments are the input document (an input schema that
 * is not an object is wrapped as `{ input }`); its outputSchema is the manifest's, so a client
 * validates the structured result the way capsule already did.
 */
export function mcpCapabilityToolOf(capability: Capability, isolation: IsolationReport): McpTool {
  const { $schema: _ignored, ...input } = capability.manifest.inputSchema;
  const inputSchema = objectInput(capability)
    ? { ...input, type: 'object' }
    : { type: 'object', properties: { input }, required: ['input'] };
  const annotations = capabilityAnnotations(capability, isolation);
  const output = capability.manifest.outputSchema;
  let outputSchema: McpTool['outputSchema'];
  if (output !== undefined) {
    const { $schema: _s, ...rest } = output;
    outputSchema = { ...rest, type: 'object' } as McpTool['outputSchema'];
  }
  return {
    name: `${CAPABILITY_TOOL_PREFIX}${capability.name}`,
    title: annotations.title,
    description: `${capability.manifest.description} [capability ${capability.name}, ${capability.environment}; ${isolation.sandboxed ? 'sandboxed' : 'NOT sandboxed'}; asks permission run_capability:${capability.name}]`,
    inputSchema: inputSchema as McpTool['inputSchema'],
    ...(outputSchema !== undefined ? { outputSchema } : {}),
    annotations,
  };
}

/**
 * Pure: a capability tool's result. A run with an outputSchema returns the validated output as
 * `structuredContent`; any failure (exit code, limits, output that broke the schema) is an `isError`
 * result without structuredContent, so a client never takes it for valid output.
 */
export function capabilityResultOf(capability: string, value: unknown): CallToolResult {
  const result = toolResultOf(`${CAPABILITY_TOOL_PREFIX}${capability}`, value);
  if (result.isError === true) {
    delete result.structuredContent;
    return result;
  }
  const run = value as Partial<RunResult>;
  if (run.output !== undefined) result.structuredContent = run.output as Record<string, unknown>;
  return result;
}

interface RunLike {
  exitCode: number | null;
  signal?: string | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  canceled: boolean;
  truncated: boolean;
  oomKilled?: boolean;
  outputInvalid?: string | undefined;
}

function isRunLike(value: unknown): value is RunLike {
  return (
    typeof value === 'object' &&
    value !== null &&
    'exitCode' in value &&
    'stderr' in value &&
    'timedOut' in value &&
    'canceled' in value
  );
}

/** Pure: a tool result as MCP content. A run that did not succeed is an `isError` result with the exit code and stderr. */
export function toolResultOf(name: string, value: unknown): CallToolResult {
  const result = toolResultBody(name, value);
  // capsule's own warnings (a protected file changed during the call) come last, as their own text.
  const warnings = (result.structuredContent as { warnings?: unknown } | undefined)?.warnings;
  if (Array.isArray(warnings)) {
    for (const w of warnings)
      if (typeof w === 'string') result.content.push({ type: 'text', text: `capsule warning: ${w}` });
  }
  return result;
}

function toolResultBody(
  name: string,
  value: unknown,
): CallToolResult & { content: CallToolResult['content'] } {
  const structured =
    typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : { value };
  if (isRunLike(value)) {
    const failed =
      value.exitCode !== 0 ||
      value.timedOut ||
      value.canceled ||
      value.truncated ||
      value.oomKilled === true ||
      value.outputInvalid !== undefined;
    if (failed) {
      const why =
        value.outputInvalid !== undefined
          ? `broke its outputSchema: ${value.outputInvalid}`
          : value.timedOut
            ? 'timed out and was killed'
            : value.canceled
              ? 'was canceled'
              : value.truncated
                ? 'passed its output limit and was killed'
                : value.oomKilled === true
                  ? 'hit its memory limit and was killed'
                  : value.exitCode !== null
                    ? `exited with code ${value.exitCode}`
                    : `was killed by ${value.signal ?? 'a signal'}`;
      const text = `${name} failed: the run ${why} (exit code ${value.exitCode ?? 'none'}).\nstderr:\n${value.stderr || '(empty)'}\nstdout:\n${value.stdout || '(empty)'}`;
      return { isError: true, content: [{ type: 'text', text }], structuredContent: structured };
    }
    return {
      content: [
        { type: 'text', text: value.stdout },
        ...(value.stderr !== '' ? [{ type: 'text' as const, text: `stderr:\n${value.stderr}` }] : []),
      ],
      structuredContent: structured,
    };
  }
  return { content: [{ type: 'text', text: JSON.stringify(value, null, 2) }], structuredContent: structured };
}

/** Pure: a CapsuleError (or anything thrown by a tool) as an `isError` result; never a stack trace. */
export function errorResultOf(err: unknown, canElicit: boolean): CallToolResult {
  if (err instanceof CapsuleError && err.code === 'PERMISSION_DENIED' && err.details.denial !== undefined) {
    // The engine's own text says how to allow the key on the command line; an agent cannot do that,
    // so it is told what happened and what a person must do.
    return {
      isError: true,
      content: [{ type: 'text', text: agentDenialText(err.details.denial, canElicit) }],
    };
  }
  if (err instanceof CapsuleError) {
    let text = `${err.code}: ${err.message}`;
    if (err.code === 'CEILING_VIOLATION') text = `${err.code}: denied by the ceiling. ${err.message}`;
    if (err.details.hint !== undefined && !err.message.includes(err.details.hint))
      text += `\nhint: ${err.details.hint}`;
    else if (err.code === 'USAGE' && err.message.startsWith('Invalid arguments'))
      text +=
        "\nhint: fix that argument; the tool's inputSchema in tools/list lists every field and its type.";
    for (const issue of err.details.issues?.slice(1, 10) ?? []) {
      text += `\n  ${issue.field !== undefined ? `${issue.field}: ` : ''}${issue.message}`;
    }
    if (err.code === 'PERMISSION_DENIED' && !canElicit && err.details.key !== undefined) {
      text +=
        `\nThis MCP client does not support elicitation, so capsule cannot ask a human. ` +
        `To allow ${err.details.key}, start the server with: capsule mcp --grant '${err.details.key}'` +
        ` (or add a project grant in capsule.json for sandboxed capabilities), or use a client with elicitation support.`;
    }
    return { isError: true, content: [{ type: 'text', text }] };
  }
  const message = err instanceof Error ? err.message : String(err);
  return {
    isError: true,
    content: [
      { type: 'text', text: `INTERNAL: ${message} (a bug in capsule; set CAPSULE_DEBUG=1 and report it)` },
    ],
  };
}

/**
 * capsule's MCP server: tools/list is the active profile's catalog; tools/call goes through the
 * session's executor (arguments, permission(), the gate, execute()). Asks become elicitations;
 * a cancellation notification aborts the call's AbortSignal, which reaches the runner.
 */
export class CapsuleMcpServer {
  readonly server: Server;
  private sessionValue: AgentSession | undefined;
  private readonly options: CapsuleMcpServerOptions;
  /** A built-in tool's description never changes: its JSON Schema is made once. */
  private readonly described = new WeakMap<AgentTool, McpTool>();

  constructor(options: CapsuleMcpServerOptions) {
    this.options = options;
    this.server = new Server(
      { name: MCP_SERVER_NAME, version: options.version },
      {
        capabilities: { tools: { listChanged: true } },
        instructions:
          'capsule runs capabilities (small tools in shell, wasm or docker) behind a permission gate. ' +
          'Read-only tools never ask; anything that changes things may ask the human (elicitation). ' +
          'Each capability is also a tool of its own, cap_<name> (the tool list changes when capabilities do). ' +
          'Prefer generate_wasm_capability: wasm runs sandboxed and can be approved for the whole project.',
      },
    );
    this.server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [...this.session.tools().map((t) => this.describe(t)), ...(await this.capabilityTools())],
    }));
    this.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      const session = this.session;
      const name = request.params.name;
      const capability = capabilityOfToolName(name);
      if (capability !== undefined && session.findTool('run_capability') === undefined) {
        throw new McpError(
          ErrorCode.InvalidParams,
          `Unknown tool: ${name}. This session (profile ${session.profile.name}) does not run capabilities.`,
        );
      }
      if (capability === undefined && session.findTool(name) === undefined) {
        // An unknown (or hidden) tool is a protocol error, not a failed run.
        throw new McpError(
          ErrorCode.InvalidParams,
          `Unknown tool: ${name}. This session (profile ${session.profile.name}) offers: ${session.toolNames().join(', ')}.`,
        );
      }
      const token = request.params._meta?.progressToken;
      // MCP requires progress to increase with every notification: count the steps ourselves.
      let step = 0;
      const progress: ProgressReporter | undefined =
        token === undefined
          ? undefined
          : (p) => {
              step += 1;
              void extra
                .sendNotification({
                  method: 'notifications/progress',
                  params: { progressToken: token, progress: step, message: p.message },
                })
                .catch(() => undefined);
            };
      const options = { signal: extra.signal, progress, callId: String(extra.requestId) };
      const args = request.params.arguments ?? {};
      // What tools/list shows changes with generate_* and reload; any other call that can write
      // (a file tool, run_command, a capability) may change it too: compare the listing around it.
      const announces = name.startsWith('generate_') || name === 'reload';
      const mayWrite =
        !announces &&
        session.findTool(capability === undefined ? name : 'run_capability')?.kind !== 'READ_ONLY';
      const before = mayWrite ? await this.capabilityListing() : undefined;
      try {
        if (capability !== undefined) {
          const input = await this.capabilityInput(capability, args);
          const value = await session.call('run_capability', { name: capability, input }, options);
          return capabilityResultOf(capability, value);
        }
        const value = await session.call(name, args, options);
        if (announces) this.toolsChanged();
        return toolResultOf(name, value);
      } catch (err) {
        return errorResultOf(err, clientCanElicit(this.server));
      } finally {
        if (before !== undefined && (await this.capabilityListing()) !== before) this.toolsChanged();
      }
    });
  }

  /** Every valid capability as a tool, read afresh, when this session may run capabilities. */
  private async capabilityTools(): Promise<McpTool[]> {
    const session = this.session;
    if (session.findTool('run_capability') === undefined) return [];
    const scan = await session.registry.scan();
    return scan.capabilities.map((c) => mcpCapabilityToolOf(c, session.executor.isolation(c)));
  }

  /**
   * The capability tools tools/list would show, as one string of names and content hashes (the scan
   * index keeps this cheap); undefined when this session lists no capabilities.
   */
  private async capabilityListing(): Promise<string | undefined> {
    const session = this.session;
    if (session.findTool('run_capability') === undefined) return undefined;
    try {
      const scan = await session.registry.scan();
      return JSON.stringify(scan.capabilities.map((c) => [c.name, c.contentHash]).sort());
    } catch {
      // A scan that fails is reported by tools/list itself; it cannot tell a change here.
      return undefined;
    }
  }

  /** A capability tool's arguments as the capability's input (unwrapped when its schema is not an object). */
  private async capabilityInput(name: string, args: Record<string, unknown>): Promise<unknown> {
    // One capability's folder, not a scan (the run resolves and stages it again, as it always does).
    const capability = await this.session.registry.get(name);
    return objectInput(capability) ? args : args.input;
  }

  private describe(tool: AgentTool): McpTool {
    let described = this.described.get(tool);
    if (described === undefined) {
      described = mcpToolOf(tool);
      this.described.set(tool, described);
    }
    return described;
  }

  private toolsChanged(): void {
    void this.server.sendToolListChanged().catch(() => undefined);
  }

  get session(): AgentSession {
    if (this.sessionValue === undefined)
      throw new McpError(ErrorCode.InternalError, 'capsule session is not open yet');
    return this.sessionValue;
  }

  /** Open the session (with the elicitation hooks) and connect the transport. */
  async start(transport: Transport): Promise<void> {
    this.sessionValue = await this.options.openSession({
      prompter: createElicitationPrompter(this.server),
      approvePlan: createElicitationPlanApproval(this.server),
      confirmPolicy: createElicitationPolicyConfirmer(this.server),
      confirmWrite: createElicitationWriteConfirmer(this.server),
    });
    await this.server.connect(transport);
  }

  async close(): Promise<void> {
    await this.server.close();
    await this.sessionValue?.close();
  }
}
