import type { z } from 'zod';
import { deriveVariant } from './variants.js';
import { CapsuleError } from '../base/errors.js';
import { zodIssues } from '../base/zod-issues.js';
import type { Capability, Environment } from '../manifest/types.js';
import type { Decision, PermissionGate, PermissionRequest } from '../permissions/types.js';
import type { Registry } from '../registry/registry.js';
import { mintRunnerPermit } from '../runners/permit.js';
import { ShellRunner } from '../runners/shell-runner.js';
import type { Observation, RunResult, Runner } from '../runners/types.js';
import type { CapabilityContext, RunPermit } from '../tools/ports.js';

export type { RunPermit };
import { capabilityKey, createRunCapabilityTool } from '../tools/run-capability.js';
import type { Tool } from '../tools/tool.js';
import { noTelemetry, type Telemetry, type ToolCallSpan } from '../telemetry/telemetry.js';
import { defaultIsolation, type IsolationJudge, type IsolationReport } from './isolation.js';
import { CapabilityStage, makeWritable } from './stage.js';

export interface ExecutorOptions {
  registry: Registry;
  gate: PermissionGate;
  runners: readonly Runner[];
  /** How sandboxed a capability is, from its effective configuration (runners refine this). */
  isolation?: IsolationJudge;
  /** Where approved bytes are staged (default: a fresh folder under the OS temporary directory). */
  stage?: CapabilityStage | undefined;
  /** Where decisions and runs are exported as spans (default: nowhere). */
  telemetry?: Telemetry | undefined;
}

export interface CallOutcome<R> {
  decision: Decision | undefined;
  result: R;
  /** The capabilities the call resolved: exactly what permission() judged and execute() ran (staged). */
  capabilities: Capability[];
}

/** One requested environment of a plan: the staged variant that would run there, or why it cannot. */
export type PlannedVariant =
  | {
      environment: Environment;
      ok: true;
      capability: Capability;
      how: string;
      isolation: IsolationReport;
    }
  | { environment: Environment; ok: false; reason: string };

/** One capability, staged once, in several environments: compare and ci ask the gate once for it. */
export interface VariantPlan {
  /** The staged capability: its content hash is the one the gate is asked about. */
  readonly capability: Capability;
  readonly variants: readonly PlannedVariant[];
  /** Revokes the plan's permit and removes the variants' staged copies. */
  release(): Promise<void>;
}

/**
 * One session's executor: validates a tool call's arguments, asks permission() and the gate, and
 * only then calls execute(). A denied call never reaches execute(), and a capability runs only
 * through a permit this executor issued after its gate allowed exactly that staged content.
 */
export class Executor {
  readonly registry: Registry;
  readonly gate: PermissionGate;
  readonly #runners: Map<Environment, Runner>;
  readonly #judge: IsolationJudge;
  readonly #stage: CapabilityStage;
  readonly #runCapabilityTool = createRunCapabilityTool();
  /** Live permits → the staged capabilities each one covers (by identity). */
  readonly #permits = new WeakMap<RunPermit, ReadonlySet<Capability>>();
  /** Live plans → the permits issued for them (revoked on release). */
  readonly #plans = new WeakMap<VariantPlan, RunPermit[]>();
  readonly #telemetry: Telemetry;
  /** The span of the call a live permit was issued in: its runs are recorded there. */
  readonly #spans = new WeakMap<RunPermit, ToolCallSpan>();
  /** Per environment: why its runner measured it is not a sandbox here (see Runner.measureIsolation). */
  readonly #measured = new Map<Environment, string>();
  /** Live permits the gate issued for a call it judged sandboxed: their runs must still be sandboxed. */
  readonly #judgedSandboxed = new WeakSet<RunPermit>();

  constructor(options: ExecutorOptions) {
    this.registry = options.registry;
    this.gate = options.gate;
    this.#runners = new Map(options.runners.map((r) => [r.environment, r]));
    // The shell line reports what the shell runner measured on this machine (probed on first use).
    const shell = options.runners.find((r): r is ShellRunner => r instanceof ShellRunner);
    this.#judge =
      options.isolation ??
      ((c) => defaultIsolation(c, c.environment === 'shell' ? shell?.confinement() : undefined));
    this.#stage = options.stage ?? new CapabilityStage();
    this.#telemetry = options.telemetry ?? noTelemetry;
  }

  isolation(capability: Capability): IsolationReport {
    const report = this.#judge(capability);
    const weaker = this.#measured.get(capability.environment);
    if (!report.sandboxed || weaker === undefined) return report;
    // What the runner measured where it runs outranks what the configuration promises.
    return { ...report, sandboxed: false, summary: `${report.summary}, but ${weaker} — not sandboxed` };
  }

  /**
   * Ask the runner of `environment` what it measures before each call of it is judged: the runner answers from
   * its measurement while the daemon measured is still the one a call reaches, and measures again otherwise.
   */
  async #measure(environment: Environment): Promise<void> {
    const runner = this.#runners.get(environment);
    if (runner?.measureIsolation === undefined) return;
    let weaker: string | undefined;
    try {
      weaker = await runner.measureIsolation();
    } catch (err) {
      weaker = `its isolation could not be measured (${(err as Error).message})`;
    }
    if (weaker !== undefined) this.#measured.set(environment, weaker);
    else this.#measured.delete(environment);
  }

  /**
   * The input as the capability gets it, checked against its inputSchema. One turn of the event loop
   * comes first: a check holds the thread (up to its deadline, src/manifest/input.ts), and a loop of
   * calls that never waited on I/O between them (ci's cases, compare's inputs) would otherwise starve
   * signals and other requests for as long as the loop lasts.
   */
  async validateInput(capability: Capability, inputText: string): Promise<string> {
    await new Promise<void>((resolve) => setImmediate(resolve));
    return this.registry.inputValidator.validate(capability, inputText);
  }

  /** Whether this session can run `environment` here now (the runner is configured and answers). */
  async available(environment: Environment): Promise<{ ok: true } | { ok: false; reason: string }> {
    const runner = this.#runners.get(environment);
    if (runner === undefined) return { ok: false, reason: `no ${environment} runner is configured` };
    try {
      return await runner.available();
    } catch (err) {
      return { ok: false, reason: (err as Error).message };
    }
  }

  /**
   * Resolve `name` afresh and stage its bytes; the staged copy's hash is the one the gate sees and
   * the one that runs. A folder that changes while it is copied is read again (a writer in progress).
   */
  async #prepare(name: string): Promise<Capability> {
    for (let attempt = 1; ; attempt++) {
      const capability = await this.registry.get(name);
      // One worker's start overlaps staging, the gate and the audit append; nothing runs before the permit.
      void this.#runners
        .get(capability.environment)
        ?.warm?.(1)
        .catch(() => undefined);
      // The input check after the permit compiles the input schema: its validator loads meanwhile.
      const { inputSchema, outputSchema } = capability.manifest;
      const validator = this.registry.inputValidator
        .preload([inputSchema, outputSchema])
        .catch(() => undefined);
      try {
        // The engine's measurement (requests to it) and the staging (a copy and a hash on this host) at once:
        // neither reads the other, and both are done before the call is judged.
        const [, staged] = await Promise.all([
          this.#measure(capability.environment),
          this.#stage.stage(capability),
        ]);
        // The staged bytes are read and compiled while the gate judges them (nothing of them runs).
        void this.#runners
          .get(staged.environment)
          ?.preload?.(staged)
          .catch(() => undefined);
        await validator;
        return staged;
      } catch (err) {
        if (attempt >= 3 || !(err instanceof CapsuleError) || err.code !== 'MANIFEST_INVALID') throw err;
      }
    }
  }

  /** Runs `capability` (a staged capability covered by `permit`). Throws PERMISSION_DENIED otherwise. */
  async runApproved(
    permit: RunPermit | undefined,
    capability: Capability,
    inputText: string,
    signal?: AbortSignal,
    /** `engine`: run on this configured Docker engine only (compare across engines). */
    options: {
      engine?: string | undefined;
      /** A learning run: the runner observes what it reaches (RunResult.observed); every limit stays. */
      learn?: boolean | undefined;
    } = {},
  ): Promise<RunResult> {
    const covered = permit === undefined ? undefined : this.#permits.get(permit);
    if (covered === undefined || !covered.has(capability)) {
      throw new CapsuleError(
        'PERMISSION_DENIED',
        `${capability.name} was not approved for this run: only what the gate allowed, as it was staged, runs.`,
        { key: `run_capability:${capability.name}` },
      );
    }
    const runner = this.#runners.get(capability.environment);
    if (runner === undefined) {
      throw new CapsuleError(
        'RUNNER_UNAVAILABLE',
        `No ${capability.environment} runner is configured in this capsule.`,
        { hint: 'This environment is not available here; see docs/runners.md.' },
      );
    }
    const gate = this.gate;
    // The runner's own proof, for this one run of exactly this staged capability: the only way to a runner.
    const runnerPermit = mintRunnerPermit(capability);
    // A run outside a tool call (compare, ci) gets a span of its own.
    const inCall = permit === undefined ? undefined : this.#spans.get(permit);
    const span = inCall ?? this.#telemetry.startToolCall({ tool: 'run_capability' });
    let result: RunResult;
    // Requests the run's egress policy refused: part of the result, so every caller (ci above all)
    // sees that the capability tried to reach what it was not granted, whatever it printed.
    const refused: string[] = [];
    // A learning run also keeps every request capsule's egress policy judged, allowed or refused.
    const requests: Observation[] = [];
    try {
      result = this.#checkOutput(
        capability,
        await runner.run(
          {
            capability,
            input: inputText,
            signal,
            engine: options.engine,
            // Judged sandboxed: the runner re-checks that against what it measures where the call lands.
            requireSandboxed: this.#judgedSandboxed.has(permit as RunPermit),
            learn: options.learn,
            egressAudit: async (record) => {
              if (record.decision === 'deny') refused.push(`${record.method} ${record.host}:${record.port}`);
              if (options.learn === true) {
                requests.push({
                  op: 'http',
                  host: record.host,
                  port: record.port,
                  method: record.method,
                  outcome: record.decision === 'allow' ? 'ok' : 'refused',
                  via: 'egress',
                });
              }
              await gate.recordNetwork?.(record);
            },
          },
          runnerPermit,
        ),
      );
      if (refused.length > 0) result = { ...result, networkDenied: refused };
      if (options.learn === true) {
        const seen = result.observed ?? { observations: [], unobserved: [] };
        result = { ...result, observed: { ...seen, observations: [...seen.observations, ...requests] } };
      }
    } catch (err) {
      if (inCall === undefined) span.end(err);
      throw err;
    }
    span.run(result, capability);
    if (inCall === undefined) span.end();
    return result;
  }

  /** Every run of a capability with an outputSchema is checked here, whoever asked for it. */
  #checkOutput(capability: Capability, result: RunResult): RunResult {
    if (capability.manifest.outputSchema === undefined) return result;
    // A run that already failed is reported as such; its output is not the capability's answer.
    if (result.exitCode !== 0 || result.timedOut || result.canceled || result.truncated || result.oomKilled)
      return result;
    const checked = this.registry.inputValidator.checkOutput(capability, result.stdout);
    if (checked === undefined) return result;
    return checked.ok ? { ...result, output: checked.value } : { ...result, outputInvalid: checked.message };
  }

  // --- tool calls --------------------------------------------------------------------------

  /** The gate, then execute(). Throws PERMISSION_DENIED (with the key) when the gate denies. */
  async call<Ctx extends CapabilityContext, R>(
    tool: Tool<z.ZodType, R, Ctx>,
    rawArgs: unknown,
    context: Omit<Ctx, keyof CapabilityContext> & {
      signal?: AbortSignal | undefined;
      callId?: string | undefined;
    },
  ): Promise<CallOutcome<R>> {
    const span = this.#telemetry.startToolCall({ tool: tool.name, callId: context.callId });
    try {
      const parsed = tool.parameters.safeParse(rawArgs);
      if (!parsed.success) {
        const issues = zodIssues(parsed.error, rawArgs);
        const first = issues[0];
        throw new CapsuleError(
          'USAGE',
          `Invalid arguments for ${tool.name}: ${first?.field ?? '(arguments)'}: ${first?.message ?? ''}`.trim(),
          { issues },
        );
      }
      const outcome = await this.#call(tool, parsed.data, context, span);
      span.end();
      return outcome;
    } catch (err) {
      span.end(err);
      throw err;
    }
  }

  async #call<Ctx extends CapabilityContext, R>(
    tool: Tool<z.ZodType, R, Ctx>,
    args: z.infer<z.ZodType>,
    context: Omit<Ctx, keyof CapabilityContext> & {
      signal?: AbortSignal | undefined;
      callId?: string | undefined;
    },
    span: ToolCallSpan,
  ): Promise<CallOutcome<R>> {
    const { ctx: base, prepared } = this.#contextFor(context);
    const ctx = base as Ctx;
    const check = await tool.permission(args, ctx);
    let decision: Decision | undefined;
    let permit: RunPermit | undefined;
    if (check.permission.type === 'ask') {
      const request: PermissionRequest = {
        tool: tool.name,
        kind: tool.kind,
        key: check.permission.key,
        subject: check.subject,
        sandboxed: check.sandboxed,
        isolation: check.isolation,
        contentHash: check.contentHash,
      };
      decision = await this.#decide(request, context.signal, span);
      // What permission() staged is what the gate judged; only that, with the hash the gate saw, may run.
      const staged = await Promise.all(prepared.values());
      permit = this.#issue(
        request,
        staged.filter((c) => c.contentHash === request.contentHash),
      );
      base.permit = permit;
      this.#spans.set(permit, span);
    }
    try {
      const result = await tool.execute(args, ctx);
      return { decision, result, capabilities: await Promise.all(prepared.values()) };
    } finally {
      if (permit !== undefined) this.#permits.delete(permit);
    }
  }

  /** run_capability through the gate: the library entry point behind `capsule run`. */
  async run(
    name: string,
    input: unknown,
    options: { signal?: AbortSignal } = {},
  ): Promise<CallOutcome<RunResult> & { capability: Capability }> {
    const outcome = await this.call(this.#runCapabilityTool, { name, input }, options);
    return { ...outcome, capability: outcome.capabilities[0] as Capability };
  }

  // --- one decision, several runs (compare, ci) --------------------------------------------

  /**
   * Stage `name` once and derive the variant it would run as in each of `environments`. Nothing is
   * asked or run yet: approve() asks the gate once for the whole plan.
   */
  async planVariants(name: string | Capability, environments: readonly Environment[]): Promise<VariantPlan> {
    // A capability given as loaded (a candidate `capsule learn` proves before it is written) is staged as is.
    const capability = typeof name === 'string' ? await this.#prepare(name) : await this.#stage.stage(name);
    for (const environment of environments) await this.#measure(environment);
    const variants: PlannedVariant[] = [];
    const cleanups: Array<() => Promise<void>> = [];
    try {
      for (const environment of environments) {
        const variant = await deriveVariant(capability, environment);
        if (!variant.ok) {
          variants.push({ environment, ok: false, reason: variant.reason });
          continue;
        }
        const { cleanup } = variant;
        if (cleanup !== undefined) {
          // A variant copied from the stage inherits its read-only folders: unlock them to remove them.
          const dir = variant.capability.dir;
          cleanups.push(async () => {
            await makeWritable(dir).catch(() => undefined);
            await cleanup();
          });
        }
        variants.push({
          environment,
          ok: true,
          capability: variant.capability,
          how: variant.how,
          isolation: this.isolation(variant.capability),
        });
      }
    } catch (err) {
      await Promise.all(cleanups.map((c) => c()));
      throw err;
    }
    const permits: RunPermit[] = [];
    const plan: VariantPlan = {
      capability,
      variants,
      release: async () => {
        this.#plans.delete(plan);
        for (const p of permits.splice(0)) this.#permits.delete(p);
        await Promise.all(cleanups.splice(0).map((c) => c()));
      },
    };
    this.#plans.set(plan, permits);
    return plan;
  }

  /**
   * One gate decision for running a plan's runnable variants: the key is run_capability:<name>, judged
   * by the least isolated variant and bound to the staged content hash. Throws PERMISSION_DENIED.
   * `environments` narrows the decision (and the permit) to some of the plan's variants.
   */
  async approve(
    plan: VariantPlan,
    options: {
      environments?: readonly Environment[] | undefined;
      signal?: AbortSignal | undefined;
      /** Runs of `capsule learn`: asked and decided like any run, and recorded as learning. */
      learning?: boolean | undefined;
    } = {},
  ): Promise<RunPermit> {
    const permits = this.#plans.get(plan);
    if (permits === undefined) {
      throw new CapsuleError('USAGE', 'This plan was not made by this executor, or it was released.');
    }
    const runnable = plan.variants.filter(
      (v): v is Extract<PlannedVariant, { ok: true }> =>
        v.ok && (options.environments === undefined || options.environments.includes(v.environment)),
    );
    if (runnable.length === 0) {
      throw new CapsuleError('UNSUPPORTED', `"${plan.capability.name}" has no variant to run here.`);
    }
    const weakest = runnable.find((v) => !v.isolation.sandboxed) ?? runnable[0];
    const permission = capabilityKey(plan.capability.name);
    if (permission.type !== 'ask') throw new Error('run_capability always asks');
    const request: PermissionRequest = {
      tool: 'run_capability',
      kind: 'OTHER',
      key: permission.key,
      subject: plan.capability.name,
      sandboxed: runnable.every((v) => v.isolation.sandboxed),
      isolation: weakest?.isolation.summary,
      contentHash: plan.capability.contentHash,
      learning: options.learning === true ? true : undefined,
    };
    // One decision for a plan's runs: a span of its own (each run gets one too).
    const span = this.#telemetry.startToolCall({ tool: 'run_capability' });
    try {
      await this.#decide(request, options.signal, span);
      span.end();
    } catch (err) {
      span.end(err);
      throw err;
    }
    const permit = this.#issue(
      request,
      runnable.map((v) => v.capability),
    );
    permits.push(permit);
    return permit;
  }

  async close(): Promise<void> {
    await Promise.all([...this.#runners.values()].map((r) => r.close()));
    await this.#stage.close();
    await this.#telemetry.flush();
  }

  // --- internals ---------------------------------------------------------------------------

  async #decide(
    request: PermissionRequest,
    signal: AbortSignal | undefined,
    span: ToolCallSpan,
  ): Promise<Decision> {
    const decision = await this.gate.check(request, signal);
    span.decision(request, decision);
    if (decision.outcome !== 'allow') {
      // The gate's reason already says how to allow the key (quoted for the shell where needed).
      throw new CapsuleError('PERMISSION_DENIED', decision.reason, {
        key: decision.key,
        denial: decision.denial,
      });
    }
    return decision;
  }

  #issue(request: PermissionRequest, capabilities: readonly Capability[]): RunPermit {
    const permit: RunPermit = Object.freeze({
      capability: request.subject,
      contentHash: request.contentHash ?? '',
      key: request.key.raw,
    });
    this.#permits.set(permit, new Set(capabilities));
    if (request.sandboxed === true) this.#judgedSandboxed.add(permit);
    return permit;
  }

  #contextFor(extra: object): {
    ctx: CapabilityContext & { permit?: RunPermit | undefined };
    prepared: Map<string, Promise<Capability>>;
  } {
    // A per-call context: the call's signal, and one resolution (and staging) per capability name, so
    // what permission() judged (environment, content hash) is exactly what execute() runs.
    const prepared = new Map<string, Promise<Capability>>();
    const ctx: CapabilityContext & { permit?: RunPermit | undefined } = {
      ...extra,
      prepareCapability: (name: string) => {
        let found = prepared.get(name);
        if (found === undefined) {
          found = this.#prepare(name);
          prepared.set(name, found);
          found.catch(() => undefined);
        }
        return found;
      },
      isolation: (capability) => this.isolation(capability),
      validateInput: (capability, inputText) => this.validateInput(capability, inputText),
      runApproved: (permit, capability, inputText, signal) =>
        this.runApproved(permit, capability, inputText, signal),
      permit: undefined,
    };
    return { ctx, prepared };
  }
}
