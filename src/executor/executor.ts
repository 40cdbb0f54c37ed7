import type { z } from 'zod';
import { CapsuleError } from '../errors.js';
import { zodIssues } from '../manifest/parse.js';
import type { Capability, Environment } from '../manifest/types.js';
import type { Decision, PermissionGate } from '../permissions/types.js';
import type { Registry } from '../registry/registry.js';
import { ShellRunner } from '../runners/shell-runner.js';
import type { RunResult, Runner } from '../runners/types.js';
import type { CapabilityContext } from '../tools/context.js';
import { createRunCapabilityTool } from '../tools/run-capability.js';
import type { Tool } from '../tools/tool.js';
import { defaultIsolation, type IsolationJudge, type IsolationReport } from './isolation.js';

export interface ExecutorOptions {
  registry: Registry;
  gate: PermissionGate;
  runners: readonly Runner[];
  /** How sandboxed a capability is, from its effective configuration (runners refine this). */
  isolation?: IsolationJudge;
}

export interface CallOutcome<R> {
  decision: Decision | undefined;
  result: R;
  /** The capabilities the call resolved: exactly what permission() judged and execute() ran. */
  capabilities: Capability[];
}

/**
 * One session's executor: validates a tool call's arguments, asks permission() and the gate, and
 * only then calls execute(). A denied call never reaches execute().
 */
export class Executor implements CapabilityContext {
  readonly registry: Registry;
  readonly gate: PermissionGate;
  private readonly runners: Map<Environment, Runner>;
  private readonly judge: IsolationJudge;
  private readonly runCapabilityTool = createRunCapabilityTool();

  constructor(options: ExecutorOptions) {
    this.registry = options.registry;
    this.gate = options.gate;
    this.runners = new Map(options.runners.map((r) => [r.environment, r]));
    // The shell line reports what the shell runner measured on this machine (probed on first use).
    const shell = options.runners.find((r): r is ShellRunner => r instanceof ShellRunner);
    this.judge =
      options.isolation ??
      ((c) => defaultIsolation(c, c.environment === 'shell' ? shell?.confinement() : undefined));
  }

  // --- CapabilityContext -------------------------------------------------------------------

  resolveCapability(name: string): Promise<Capability> {
    return this.registry.get(name);
  }

  isolation(capability: Capability): IsolationReport {
    return this.judge(capability);
  }

  validateInput(capability: Capability, inputText: string): string {
    return this.registry.inputValidator.validate(capability, inputText);
  }

  runner(environment: Environment): Runner {
    const runner = this.runners.get(environment);
    if (runner === undefined) {
      throw new CapsuleError(
        'RUNNER_UNAVAILABLE',
        `No ${environment} runner is configured in this capsule.`,
        {
          hint: 'This environment is not available here; see docs/runners.md.',
        },
      );
    }
    return runner;
  }

  async runCapability(capability: Capability, inputText: string, signal?: AbortSignal): Promise<RunResult> {
    return this.runner(capability.environment).run({ capability, input: inputText, signal });
  }

  // --- tool calls --------------------------------------------------------------------------

  /** The gate, then execute(). Throws PERMISSION_DENIED (with the key) when the gate denies. */
  async call<Ctx extends CapabilityContext, R>(
    tool: Tool<z.ZodType, R, Ctx>,
    rawArgs: unknown,
    context: Omit<Ctx, keyof CapabilityContext> & { signal?: AbortSignal | undefined },
  ): Promise<CallOutcome<R>> {
    const parsed = tool.parameters.safeParse(rawArgs);
    if (!parsed.success) {
      const issues = zodIssues(parsed.error);
      const first = issues[0];
      throw new CapsuleError(
        'USAGE',
        `Invalid arguments for ${tool.name}: ${first?.field ?? '(arguments)'} ${first?.message ?? ''}`.trim(),
        { issues },
      );
    }
    const { ctx: base, resolved } = this.contextFor(context);
    const ctx = base as Ctx;
    const args = parsed.data;
    const check = await tool.permission(args, ctx);
    let decision: Decision | undefined;
    if (check.permission.type === 'ask') {
      decision = await this.gate.check(
        {
          tool: tool.name,
          kind: tool.kind,
          key: check.permission.key,
          subject: check.subject,
          sandboxed: check.sandboxed,
          isolation: check.isolation,
          contentHash: check.contentHash,
        },
        context.signal,
      );
      if (decision.outcome !== 'allow') {
        // The gate's reason already says how to allow the key (quoted for the shell where needed).
        throw new CapsuleError('PERMISSION_DENIED', decision.reason, { key: decision.key });
      }
    }
    const result = await tool.execute(args, ctx);
    return { decision, result, capabilities: await Promise.all(resolved.values()) };
  }

  /** run_capability through the gate: the library entry point behind `capsule run`. */
  async run(
    name: string,
    input: unknown,
    options: { signal?: AbortSignal } = {},
  ): Promise<CallOutcome<RunResult> & { capability: Capability }> {
    const outcome = await this.call(this.runCapabilityTool, { name, input }, options);
    return { ...outcome, capability: outcome.capabilities[0] as Capability };
  }

  async close(): Promise<void> {
    await Promise.all([...this.runners.values()].map((r) => r.close()));
  }

  private contextFor(extra: object): { ctx: CapabilityContext; resolved: Map<string, Promise<Capability>> } {
    // A per-call context: the call's signal, and one resolution per capability name, so what
    // permission() judged (environment, content hash) is exactly what execute() runs.
    const resolved = new Map<string, Promise<Capability>>();
    const ctx = Object.assign(Object.create(this) as CapabilityContext, extra);
    ctx.resolveCapability = (name: string) => {
      let found = resolved.get(name);
      if (found === undefined) {
        found = this.registry.get(name);
        resolved.set(name, found);
      }
      return found;
    };
    return { ctx, resolved };
  }
}
