import type { Attributes, Span, Tracer, TracerProvider } from '@opentelemetry/api';
import type { Decision, PermissionRequest } from '../permissions/types.js';
import type { RunResult } from '../runners/types.js';

/**
 * Decision telemetry: each tool call (and each decision or run outside one, as compare and ci make)
 * becomes one span following the OpenTelemetry GenAI `execute_tool` conventions, plus `capsule.*`
 * attributes. It is an export for dashboards; the JSONL audit log stays the record (docs/telemetry.md).
 */
export interface Telemetry {
  /** Start the span of one tool call. */
  startToolCall(call: { tool: string; callId?: string | undefined }): ToolCallSpan;
  /** Export what is buffered (the CLI exits right after its command; a span must not be lost). */
  flush(): Promise<void>;
}

/** One tool call's span: what the gate decided, what ran, how it ended. */
export interface ToolCallSpan {
  /** The gate's decision for `request` (a denial too: it is recorded before the call fails). */
  decision(request: PermissionRequest, decision: Decision): void;
  /** A run the call made: exit, limits, outputSchema. */
  run(result: RunResult, capability: { name: string; contentHash: string }): void;
  /** End the span; `error` (a thrown error) marks it failed. Safe to call twice. */
  end(error?: unknown): void;
}

const NOOP_SPAN: ToolCallSpan = { decision() {}, run() {}, end() {} };

/** Telemetry that records nothing (the default when no tracer provider is registered). */
export const noTelemetry: Telemetry = { startToolCall: () => NOOP_SPAN, flush: () => Promise.resolve() };

/** The tracer name and version capsule's spans carry (instrumentation scope). */
const TRACER_NAME = 'capsule';

/** The subset of `@opentelemetry/api` this module uses, passed in so it is loaded only when needed. */
export interface OtelApi {
  trace: { getTracer(name: string, version?: string): Tracer; getTracerProvider(): TracerProvider };
  SpanStatusCode: { ERROR: number; OK: number; UNSET: number };
  SpanKind: { INTERNAL: number };
}

/** Why a run counts as failed, as an `error.type` value; undefined when it succeeded. */
function runErrorType(result: RunResult): string | undefined {
  if (result.timedOut) return 'timeout';
  if (result.canceled) return 'canceled';
  if (result.truncated) return 'output_limit';
  if (result.oomKilled) return 'memory_limit';
  if (result.outputInvalid !== undefined) return 'output_schema';
  if (result.exitCode !== 0) return 'exit_code';
  return undefined;
}

function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null && 'code' in error && typeof error.code === 'string')
    return error.code;
  return error instanceof Error ? error.name : 'error';
}

/**
 * Telemetry over an OpenTelemetry tracer: from the global tracer provider (the one a process
 * registered) or from `provider` when given. Pure wiring; no state of its own.
 */
export function otelTelemetry(
  api: OtelApi,
  options: { provider?: TracerProvider; version?: string } = {},
): Telemetry {
  const tracer = (options.provider ?? api.trace).getTracer(TRACER_NAME, options.version);
  return {
    async flush() {
      // The SDK's providers have forceFlush; the global one is a proxy in front of the registered one.
      const registered = (options.provider ?? api.trace.getTracerProvider()) as TracerProvider & {
        getDelegate?: () => TracerProvider;
      };
      const provider = (registered.getDelegate?.() ?? registered) as { forceFlush?: () => Promise<void> };
      await provider.forceFlush?.().catch(() => undefined);
    },
    startToolCall({ tool, callId }) {
      const attributes: Attributes = {
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': tool,
        'gen_ai.tool.type': 'function',
      };
      if (callId !== undefined) attributes['gen_ai.tool.call.id'] = callId;
      const span: Span = tracer.startSpan(`execute_tool ${tool}`, {
        kind: api.SpanKind.INTERNAL,
        attributes,
      });
      let failed: string | undefined;
      let ended = false;
      return {
        decision(request, decision) {
          span.setAttributes({
            'capsule.key': decision.key,
            'capsule.decision': decision.outcome,
            'capsule.source': decision.source,
            'capsule.sandboxed': request.sandboxed,
            ...(decision.matched !== undefined ? { 'capsule.rule': decision.matched } : {}),
            ...(decision.denial !== undefined ? { 'capsule.denied_by': decision.denial.by } : {}),
            ...(request.contentHash !== undefined ? { 'capsule.content_hash': request.contentHash } : {}),
            ...(request.isolation !== undefined ? { 'capsule.isolation': request.isolation } : {}),
          });
          if (decision.outcome === 'deny') failed = 'PERMISSION_DENIED';
        },
        run(result, capability) {
          span.setAttributes({
            'capsule.capability': capability.name,
            'capsule.content_hash': capability.contentHash,
            'capsule.environment': result.environment,
            'capsule.run.duration_ms': result.durationMs,
            ...(result.exitCode !== null ? { 'capsule.run.exit_code': result.exitCode } : {}),
            ...(result.outputInvalid !== undefined
              ? { 'capsule.run.output_invalid': result.outputInvalid }
              : {}),
          });
          failed = runErrorType(result) ?? failed;
        },
        end(error) {
          if (ended) return;
          ended = true;
          const type = error !== undefined ? errorType(error) : failed;
          if (type !== undefined) {
            span.setAttribute('error.type', type);
            span.setStatus({
              code: api.SpanStatusCode.ERROR,
              message: error instanceof Error ? error.message : type,
            });
          }
          span.end();
        },
      };
    },
  };
}

/** Where `@opentelemetry/api` 1.x keeps what a process registered (the API's own global). */
const OTEL_GLOBAL = Symbol.for('opentelemetry.js.api.1');

/**
 * The telemetry of a process that did not pass one: OpenTelemetry when a tracer provider is
 * registered (a library user's SDK, or one preloaded with `node --import`), else nothing. The API is
 * imported only then, so a plain `capsule run` loads no telemetry code.
 */
export async function defaultTelemetry(version?: string): Promise<Telemetry> {
  const registered = (globalThis as Record<symbol, { trace?: unknown } | undefined>)[OTEL_GLOBAL];
  if (registered?.trace === undefined) return noTelemetry;
  const api = await import('@opentelemetry/api');
  return otelTelemetry(api, { version });
}
