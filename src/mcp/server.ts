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
import { CapsuleError } from '../errors.js';
import type { PolicyConfirmer } from '../permissions/policy-diff.js';
import type { Prompter } from '../permissions/prompter.js';
import type { ProgressReporter } from '../tools/ports.js';
import type { AgentTool } from '../tools/define.js';
import {
  clientCanElicit,
  createElicitationPlanApproval,
  createElicitationPolicyConfirmer,
  createElicitationPrompter,
} from './elicitation.js';

export const MCP_SERVER_NAME = 'capsule';

/** The hooks a session needs from the MCP side: who answers Asks, plan approvals and policy changes. */
export interface McpHumanHooks {
  prompter: Prompter;
  approvePlan: PlanApproval;
  confirmPolicy: PolicyConfirmer;
}

export interface CapsuleMcpServerOptions {
  version: string;
  /** Builds the session once the hooks exist (the prompter needs the server to send elicitations). */
  openSession: (hooks: McpHumanHooks) => Promise<AgentSession>;
}

/** Pure: the MCP description of one tool (JSON Schema of its zod parameters, kind as annotations). */
export function mcpToolOf(tool: AgentTool): McpTool {
  const schema = z.toJSONSchema(tool.parameters, { io: 'input', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  delete schema.$schema;
  return {
    name: tool.name,
    description: `${tool.description} [${tool.kind === 'READ_ONLY' ? 'read-only, no permission needed' : 'asks permission'}]`,
    inputSchema: { ...schema, type: 'object' } as McpTool['inputSchema'],
    annotations: {
      readOnlyHint: tool.kind === 'READ_ONLY',
      destructiveHint: tool.kind !== 'READ_ONLY',
      openWorldHint: tool.name === 'run_command',
    },
  };
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
      value.exitCode !== 0 || value.timedOut || value.canceled || value.truncated || value.oomKilled === true;
    if (failed) {
      const why = value.timedOut
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
  if (err instanceof CapsuleError) {
    let text = `${err.code}: ${err.message}`;
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

  constructor(options: CapsuleMcpServerOptions) {
    this.options = options;
    this.server = new Server(
      { name: MCP_SERVER_NAME, version: options.version },
      {
        capabilities: { tools: { listChanged: false } },
        instructions:
          'capsule runs capabilities (small tools in shell, wasm or docker) behind a permission gate. ' +
          'Read-only tools never ask; anything that changes things may ask the human (elicitation). ' +
          'Prefer generate_wasm_capability: wasm runs sandboxed and can be approved for the whole project.',
      },
    );
    this.server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: this.session.tools().map(mcpToolOf),
    }));
    this.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      const session = this.session;
      const name = request.params.name;
      if (session.findTool(name) === undefined) {
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
      try {
        const value = await session.call(name, request.params.arguments ?? {}, {
          signal: extra.signal,
          progress,
        });
        return toolResultOf(name, value);
      } catch (err) {
        return errorResultOf(err, clientCanElicit(this.server));
      }
    });
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
    });
    await this.server.connect(transport);
  }

  async close(): Promise<void> {
    await this.server.close();
    await this.sessionValue?.close();
  }
}
